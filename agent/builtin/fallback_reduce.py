"""Reductions along dimensions in the `fallback` family (agent.builtin.fallback): softmax,
log-softmax, sum, mean, amax/amin and max/min's values over one dimension or a run of adjacent
ones, each computed by the draft's own kernel (`_reduce_kernel` in kernels/fallback.py.j2)
instead of torch's.

Before this, the fallback called every op but the elementwise ones through torch, and a forward
whose only work after its library ops was such a reduction had nothing for a kernel of its own to
do: KernelBench L2 6 (softmax after a 3D convolution), 23 (a mean after GroupNorm), 24 (min, then
softmax) and 78 (a sum after two max-pools) ended kept eager. The kernel takes its sizes at run
time (outer, reduced and inner extents of the contiguous input), so the draft is as general as
the rest of the fallback's; it works in float32 and stores in the input's dtype, as torch does
for these ops.
"""
from __future__ import annotations

from typing import Any

REDUCE = "red"
SUM, MEAN, MAX, MIN, SOFTMAX, LOG_SOFTMAX = range(6)  # the kernel's MODE
MODES = {"sum": SUM, "mean": MEAN, "amax": MAX, "amin": MIN, "max": MAX, "min": MIN,
         "_softmax": SOFTMAX, "softmax": SOFTMAX, "_log_softmax": LOG_SOFTMAX, "log_softmax": LOG_SOFTMAX}
FLOATS = ("torch.float32", "torch.float16", "torch.bfloat16")


def reduction(name: str, overload: str, node: Any) -> dict[str, int] | None:
    """{mode, first, last, keepdim} of an aten reduction the fallback's kernel computes (over the
    input's dims first..last), or None where it is left to torch: another op, a dtype argument, a
    non-float input, dims that are not adjacent, or max/min whose indices are read."""
    import operator

    import torch

    mode = MODES.get(name)
    if mode is None or not node.args or not isinstance(node.args[0], torch.fx.Node):
        return None
    x = node.args[0].meta.get("val")
    if not isinstance(x, torch.Tensor) or str(x.dtype) not in FLOATS or x.dim() == 0:
        return None
    args, kwargs, rank = list(node.args), dict(node.kwargs), x.dim()
    dims: list[Any]
    if mode >= SOFTMAX:
        if overload == "int" and (len(args) > 2 or kwargs.get("dtype") is not None):
            return None
        if overload == "default" and (len(args) < 3 or args[2]):  # half_to_float: a cast torch does
            return None
        dims, keepdim = [args[1] if len(args) > 1 else kwargs.get("dim")], True
    elif name in ("max", "min"):
        if overload != "dim" or any(u.target is not operator.getitem or (u.args[1] != 0 and u.users)
                                    for u in node.users):
            return None  # the indices are read (or the whole tensor's max, another overload): torch's
        dims, keepdim = [args[1] if len(args) > 1 else kwargs.get("dim")], _flag(args, kwargs, 2)
    else:
        if kwargs.get("dtype") is not None or (name in ("sum", "mean") and overload not in ("dim_IntList", "dim")) \
                or (name in ("amax", "amin") and overload != "default"):
            return None
        given = args[1] if len(args) > 1 else kwargs.get("dim")
        dims, keepdim = (list(range(rank)) if given in (None, []) else list(given)), _flag(args, kwargs, 2)
    if not all(isinstance(d, int) for d in dims):
        return None
    run = sorted({int(d) % rank for d in dims})
    if run != list(range(run[0], run[-1] + 1)):
        return None  # not a run of adjacent dims: one (outer, reduced, inner) view cannot hold it
    return {"mode": mode, "first": run[0], "last": run[-1], "keepdim": int(bool(keepdim))}


def _flag(args: list[Any], kwargs: dict[str, Any], index: int) -> bool:
    return bool(args[index]) if len(args) > index else bool(kwargs.get("keepdim", False))


def forward_line(i: int, source: str, attrs: dict[str, Any]) -> str:
    """Forward's line computing node i from its input's name."""
    return (f"v{i} = _reduce({source}, {attrs['first']}, {attrs['last']}, {attrs['mode']}, "
            f"{bool(attrs['keepdim'])})")
