"""The window kinds of plan: pooling (agent.builtin.pooling), scans (agent.builtin.scans) and
arg-reductions (agent.builtin.argreduce). Each module has `classify` (the plan, or Unrecognized
saying why), `render` (one rendering of the candidate module, as agent.builtin.codegen's makers)
and `space` (its configurations, the shape-based default first). classify, codegen and search
dispatch here for these kinds."""
from __future__ import annotations

from types import ModuleType

from agent.builtin.ir import Leaf, Node, Plan, Unrecognized

# an op of the window family found without the op that gives it a meaning
STRAY = {"flip": "aten.flip outside a scan", "pad": "torch.cat with zeros outside a scan",
         "slice": "a slice of a computed value outside a scan", "const": "a constant tensor (zeros_like) in the computation"}


def kinds() -> dict[str, ModuleType]:
    from agent.builtin import argreduce, attention, conv, conv_reduce, pooling, scans

    return {"pool": pooling, "scan": scans, "argreduce": argreduce, "conv": conv, "conv_reduce": conv_reduce,
            "attention": attention}


def classify_window(leaves: list[Leaf], nodes: list[Node], out: int, out_glue, out_shape, out_dtype) -> Plan | None:
    """The plan when the live nodes hold a window op; None when they hold none (the other kinds)."""
    ops = {n.op for n in nodes}
    common = dict(leaves=leaves, nodes=nodes, out=out, out_glue=out_glue, out_shape=out_shape, out_dtype=out_dtype)
    for op in ("conv", "pool", "scan", "argreduce"):  # conv: agent.builtin.conv
        if op in ops:
            return kinds()[op].classify(**common)
    for op, what in STRAY.items():
        if op in ops:
            raise Unrecognized(what)
    return None


def downstream(nodes: list[Node], start: int) -> set[int]:
    """The nodes computed from node `start` (not itself)."""
    found = {start}
    for i in range(start + 1, len(nodes)):
        if any(isinstance(a, tuple) and a[0] == "node" and a[1] in found for a in nodes[i].args):
            found.add(i)
    found.discard(start)
    return found


def upstream(nodes: list[Node], start: int) -> set[int]:
    """The nodes node `start` is computed from (not itself)."""
    found: set[int] = set()
    stack = [start]
    while stack:
        for a in nodes[stack.pop()].args:
            if isinstance(a, tuple) and a[0] == "node" and a[1] not in found:
                found.add(a[1])
                stack.append(a[1])
    return found


def users(nodes: list[Node], index: int) -> list[int]:
    return [i for i, n in enumerate(nodes) if any(a == ("node", index) for a in n.args if isinstance(a, tuple))]


def epilogue_names(nodes: list[Node], indices: set[int]) -> str:
    names = sorted({nodes[i].name for i in indices if nodes[i].name != "view"})
    return f" + epilogue ({', '.join(names)})" if names else ""
