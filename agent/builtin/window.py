"""The graph helpers of the window kinds (pooling, scans, arg-reductions, convolutions: each its
own family, agent.builtin.registry): what is computed from or into a node, its users, the names of
an epilogue, and the ops of the window family that mean nothing found alone (STRAY)."""
from __future__ import annotations

from agent.builtin.ir import Node

# an op of the window family found without the op that gives it a meaning
STRAY = {"flip": "aten.flip outside a scan", "pad": "torch.cat with zeros outside a scan",
         "slice": "a slice of a computed value outside a scan", "const": "a constant tensor (zeros_like) in the computation"}


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
