"""Rewrites of the IR before the plan is chosen (agent.builtin.classify calls `hoist_row_constants`).

A sum over some dims of a product whose factors include values constant along those dims (a row's
norm, broadcast back over the row) is the sum of the other factors times those values:
sum(x / |x| * y / |y|) = sum(x * y) / (|x| |y|). The sum then no longer waits for the norms, so
all three reductions of cosine similarity share one loop over the rows (agent.builtin.fused): each
row is read once instead of twice. Sums of products with no such factor are left as they are."""
from __future__ import annotations

from typing import Any

from agent.builtin.builder import Builder
from agent.builtin.fused import is_node


def _factors(b: Builder, ref: Any, power: int, out: list[tuple[Any, int]]) -> None:
    """The factors of a product of mul/div nodes, each with its power (1 or -1)."""
    node = b.nodes[ref[1]] if is_node(ref) else None
    if node is not None and node.op == "ew" and node.name in ("mul", "div") and len(node.args) == 2:
        _factors(b, node.args[0], power, out)
        _factors(b, node.args[1], power if node.name == "mul" else -power, out)
        return
    out.append((ref, power))


def _constant(b: Builder, ref: Any, full: tuple[int, ...], dims: tuple[int, ...]) -> bool:
    """Whether `ref`, broadcast to `full`, is the same along every dim in `dims`."""
    shape = b.shape(ref)
    pad = len(full) - len(shape)
    return pad >= 0 and all(d < pad or shape[d - pad] == 1 for d in dims)


def _depends_on_reduction(b: Builder, ref: Any, seen: set[int]) -> bool:
    if not is_node(ref) or ref[1] in seen:
        return False
    seen.add(ref[1])
    node = b.nodes[ref[1]]
    return node.op == "reduce" or any(_depends_on_reduction(b, a, seen) for a in node.args)


def hoist_row_constants(b: Builder, out: int) -> int:
    """Rewrite the sums of `b` as the module docstring says; returns the output's node index after
    the nodes are put back in topological order."""
    changed = False
    for index in range(len(b.nodes)):
        node = b.nodes[index]
        if node.op != "reduce" or node.name != "sum":
            continue
        source = node.args[0]
        full, dims = b.shape(source), tuple(node.attrs["dims"])
        factors: list[tuple[Any, int]] = []
        _factors(b, source, 1, factors)
        constant = [(r, p) for r, p in factors if _constant(b, r, full, dims)]
        varying = [(r, p) for r, p in factors if not _constant(b, r, full, dims)]
        if not varying or not any(_depends_on_reduction(b, r, set()) for r, _ in constant):
            continue
        dtype = node.dtype
        inner = varying[0][0] if varying[0][1] == 1 else b.ew("reciprocal", [varying[0][0]], dtype)
        for ref, power in varying[1:]:
            inner = b.ew("mul" if power == 1 else "div", [inner, ref], dtype)
        value = b.add("reduce", "sum", [inner], node.shape, dtype, **node.attrs)
        for ref, power in constant:
            if is_node(ref) or (isinstance(ref, tuple) and ref[0] == "leaf"):
                if b.shape(ref) != node.shape and len(b.shape(ref)) > len(node.shape):  # [B, 1] for a [B] sum
                    ref = b.add("ew", "view", [ref], node.shape, dtype)
            value = b.ew("mul" if power == 1 else "div", [value, ref], dtype)
        for other in b.nodes:  # the old sum's consumers read the new value; the old sum is left unused
            other.args = [value if a == ("node", index) else a for a in other.args]
        out = value[1] if out == index else out
        changed = True
    return _topological(b, out) if changed else out


def _topological(b: Builder, out: int) -> int:
    """Renumber b's nodes so that every node comes after its operands."""
    order: list[int] = []
    state: dict[int, bool] = {}

    def visit(i: int) -> None:
        if state.get(i):
            return
        state[i] = True
        for a in b.nodes[i].args:
            if is_node(a):
                visit(a[1])
        order.append(i)

    for i in range(len(b.nodes)):
        visit(i)
    new = {old: k for k, old in enumerate(order)}
    nodes = []
    for old in order:
        node = b.nodes[old]
        node.args = [("node", new[a[1]]) if is_node(a) else a for a in node.args]
        nodes.append(node)
    b.nodes[:] = nodes
    return new[out]
