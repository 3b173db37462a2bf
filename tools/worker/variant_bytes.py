"""The memory bound on a LARGER held-out variant (tools/worker/variants.py derives it; the
reference worker holds it out only within this bound).

A larger variant costs memory the problem itself never needed, in the reference worker and in
the candidate's, so it is held out only where memory allows: its inputs, outputs and parameters
(and buffers) together may take at most MAX_RATIO times the problem's own, and at most
MAX_BYTES whatever the problem (a multi-GB KernelBench problem never doubles its memory; it has
no larger variant). The bound is checked twice: before anything is allocated at the variant's
sizes, by building and running the reference on the meta device (shapes only, no memory); and
after the reference ran it for real, on what it took. A variant whose memory cannot be known in
advance (a get_inputs or forward that cannot run on the meta device) is not held out either.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

MAX_RATIO = 2.0
MAX_BYTES = 256 << 20


@dataclass
class Footprint:
    """Bytes of a model's inputs, outputs, and parameters and buffers."""

    inputs: int
    outputs: int
    params: int

    @property
    def total(self) -> int:
        return self.inputs + self.outputs + self.params


def footprint(model: Any, inputs: list[Any], outputs: Any) -> Footprint:
    from tools.worker.inputs import tensor_bytes

    outs = list(outputs) if isinstance(outputs, (tuple, list)) else [outputs]
    state = list(model.parameters()) + list(model.buffers())
    return Footprint(tensor_bytes(inputs), tensor_bytes(outs), tensor_bytes(state))


def over_bound(need: int, own: int) -> str | None:
    """Why a variant taking `need` bytes is not held out for a problem taking `own`; None if it fits."""
    if need > MAX_BYTES:
        return (f"its inputs, outputs and parameters would take {size(need)}, over the cap of {size(MAX_BYTES)} "
                "for a larger variant")
    if need > MAX_RATIO * own:
        return (f"its inputs, outputs and parameters would take {size(need)}, {need / max(own, 1):.2f}x the "
                f"problem's {size(own)} (a larger variant may take at most {MAX_RATIO:g}x)")
    return None


def estimate(make_init: Callable[[], list[Any]], make_inputs: Callable[[], list[Any]], cls: Any) -> Footprint:
    """What the reference would take on a variant, from shapes alone: its constructor's arguments
    and inputs made, the model built and run, all on the meta device (nothing is allocated).
    `make_init` and `make_inputs` call the problem's factories with the variant's sizes in force
    and the given default device. Raises whatever the problem raises there."""
    import torch

    meta = torch.device("meta")
    init = make_init()
    inputs = make_inputs()
    with meta, torch.no_grad():
        model = cls(*init)
        outputs = model(*inputs)
    return footprint(model, inputs, outputs)


def size(n: int) -> str:
    for unit, shift in (("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if n >= 1 << shift:
            return f"{n / (1 << shift):.1f} {unit}"
    return f"{n} B"
