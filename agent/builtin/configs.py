"""What every family's configuration space is made of: the device's size (programs to fill it,
shared memory per program), the float32 dot precisions of the run, and configurations kept in
their order, each once. A family's module builds its space from these (agent.builtin.registry)."""
from __future__ import annotations

import json
import math
from typing import Any

from agent.builtin.ir import Plan

SMS = 132  # programs to fill a large GPU (H100/H200: 132 SMs)
SMEM_BYTES = 200 * 1024  # shared memory a matmul config may ask for (pipelined A and B tiles)


def dots(plan: Plan) -> tuple[str, ...]:
    """A float32 product's dot precisions under the run's precision, in the order tried."""
    from tools.precision import dot_precision

    return dot_precision(plan.precision)


def key(config: dict[str, Any]) -> str:
    return json.dumps(config, sort_keys=True)


def pow2(n: int) -> int:
    return 1 << max(0, math.ceil(math.log2(max(1, n))))


def unique(configs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The configurations in their order, each once (every plan kind's space ends with it)."""
    seen, out = set(), []
    for c in configs:
        if key(c) not in seen:
            seen.add(key(c))
            out.append(c)
    return out
