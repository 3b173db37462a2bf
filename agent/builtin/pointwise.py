"""The pointwise family: elementwise nodes only, one flat index space (kernels/pointwise.py.j2)."""
from __future__ import annotations

import math
from typing import Any

from agent.builtin.configs import pow2, unique
from agent.builtin.emitter import Emitter
from agent.builtin.indexing import Group
from agent.builtin.ir import Plan, Problem
from agent.builtin.registry import Family, register
from agent.builtin.templates import Context, common_variables, render, store_value

def render_pointwise(plan: Plan, problem: Problem, config: dict[str, Any], ctx: Context) -> str:
    out = plan.nodes[plan.out]
    total = math.prod(out.shape)
    spaces = {"full": [Group(total, "offs", "mask", "")]}
    em = Emitter(plan, spaces)
    value, present = em.gen(("node", plan.out), "full", tuple(out.shape))
    value = store_value(value, present, 1, "[BLOCK]")
    return render("pointwise.py.j2", body=em.outer, result=value,
                  **common_variables(plan, problem, config, ctx))




def pointwise_space(plan: Plan) -> list[dict[str, Any]]:
    n = math.prod(plan.nodes[plan.out].shape)
    cap = max(128, pow2(n))
    order = [(1024, 4), (2048, 8), (4096, 8), (512, 4), (2048, 4), (8192, 16), (1024, 8), (4096, 4), (256, 2), (8192, 8)]
    if n >= 1 << 24:  # large: wide blocks first
        order = [(2048, 8), (4096, 8), (1024, 4), (8192, 16), (4096, 4)] + order
    return unique([{"BLOCK": min(b, cap), "num_warps": min(w, max(1, min(b, cap) // 128))} for b, w in order])


FAMILY = register(Family(kind="pointwise", render=render_pointwise, space=pointwise_space))
