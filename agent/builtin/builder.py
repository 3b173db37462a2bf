"""The builder of the IR (agent.builtin.ir): it appends leaves and nodes, computing each node's
shape (broadcasting for elementwise nodes, the kept or dropped dims of a reduction), and expands a
mean into a sum and a scale."""
from __future__ import annotations

import math
from typing import Any

from agent.builtin.ir import Leaf, Node, Problem, Unrecognized


class Builder:
    def __init__(self, problem: Problem) -> None:
        self.problem = problem
        self.leaves: list[Leaf] = []
        self.nodes: list[Node] = []

    # refs
    def leaf(self, leaf: Leaf) -> tuple[str, int]:
        self.leaves.append(leaf)
        return ("leaf", len(self.leaves) - 1)

    def add(self, op: str, name: str, args: list[Any], shape, dtype: str, **attrs: Any) -> tuple[str, int]:
        self.nodes.append(Node(op, name, list(args), tuple(int(s) for s in shape), dtype, attrs))
        return ("node", len(self.nodes) - 1)

    def shape(self, ref) -> tuple[int, ...]:
        if not isinstance(ref, tuple):
            return ()
        return self.leaves[ref[1]].shape if ref[0] == "leaf" else self.nodes[ref[1]].shape

    def ew(self, name: str, args: list[Any], dtype: str, **attrs: Any):
        shape = _broadcast([self.shape(a) for a in args])
        return self.add("ew", name, args, shape, dtype, **attrs)

    def reduce(self, name: str, x, dims: tuple[int, ...], keepdim: bool, dtype: str, **attrs: Any):
        shape = self.shape(x)
        dims = tuple(sorted(d % len(shape) for d in dims)) if shape else ()
        if not dims:
            raise Unrecognized("a reduction over all dimensions (a scalar result)")
        out = tuple(1 if i in dims else s for i, s in enumerate(shape)) if keepdim else \
            tuple(s for i, s in enumerate(shape) if i not in dims)
        return self.add("reduce", name, [x], out, dtype, dims=dims, keepdim=keepdim, **attrs)

    def mean(self, x, dims, keepdim, dtype, **attrs):
        shape = self.shape(x)
        dims = tuple(d % len(shape) for d in dims)
        count = math.prod(shape[d] for d in dims)
        total = self.reduce("sum", x, dims, keepdim, dtype, **attrs)
        return self.ew("mul", [total, 1.0 / count], dtype)


def _broadcast(shapes: list[tuple[int, ...]]) -> tuple[int, ...]:
    rank = max((len(s) for s in shapes), default=0)
    out = [1] * rank
    for shape in shapes:
        for i, size in enumerate(shape):
            j = rank - len(shape) + i
            if out[j] == 1:
                out[j] = size
            elif size not in (1, out[j]):
                raise Unrecognized(f"shapes {shapes} do not broadcast")
    return tuple(out)


class Unusable:
    """A value the forward must not use (the indices of max(dim), layer norm's saved statistics)."""

    def __init__(self, what: str) -> None:
        self.what = what


def returned(output: Any) -> Any:
    """The one fx node a traced forward's output node returns; Unrecognized for any other number."""
    import torch

    outs = output.args[0]
    outs = list(outs) if isinstance(outs, (list, tuple)) else [outs]
    if len(outs) != 1 or not isinstance(outs[0], torch.fx.Node):
        raise Unrecognized(f"forward returns {len(outs)} values; the built-in kernels write one tensor")
    return outs[0]
