"""`ratchet log --tree`: a problem's attempts drawn as the search made them, from their trailers.

Each attempt hangs under the attempt its conversation answered (`Ratchet-Parent-Attempt`); an
attempt that answered the task itself, or was committed before lineages were recorded, is a root.
An attempt with one child is followed by it on the same column (a width-1 run is one straight
line); where several answered the same attempt (a fork of the beam, docs/search.md), each starts a
branch (`├──`, `└──`), indented under it. Runs are drawn apart, in the order they began, each with
the lineages it used. `*` marks the workspace's best.
"""
from __future__ import annotations

from agent.workspace.attempt import Attempt


def tree_lines(attempts: list[Attempt]) -> list[str]:
    runs: dict[str, list[Attempt]] = {}
    for a in attempts:
        runs.setdefault(a.run_id or "n/a", []).append(a)
    lines: list[str] = []
    for run_id, members in runs.items():
        numbers = {a.number for a in members}
        children: dict[int | None, list[Attempt]] = {}
        for a in members:
            parent = a.parent_attempt if a.parent_attempt in numbers and a.parent_attempt != a.number else None
            children.setdefault(parent, []).append(a)
        lineages = sorted({a.lineage for a in members if a.lineage is not None})
        used = f"{len(lineages)} lineage(s)" if lineages else "lineages not recorded"
        lines.append(f"run {run_id}: {len(members)} attempt(s), {used}")
        lines.extend(_draw(children))
    return lines


def _draw(children: dict[int | None, list[Attempt]]) -> list[str]:
    """Depth first, without recursion (a width-1 run of thousands of attempts is one long chain)."""
    out: list[str] = []
    # (attempt, the indent of its column, the branch marker its line starts with)
    todo: list[tuple[Attempt, str, str]] = [(a, "", "") for a in reversed(children.get(None, []))]
    while todo:
        node, indent, marker = todo.pop()
        lineage = "" if node.lineage is None else f"  [lineage {node.lineage}]"
        out.append(f"{indent}{marker}{'*' if node.is_best else ''}{node.number} {node.summary()}{lineage}")
        column = indent + ("" if not marker else "    " if marker.startswith("└") else "│   ")
        below = children.get(node.number, [])
        if len(below) == 1:
            todo.append((below[0], column, ""))
        else:
            todo.extend((child, column, "└── " if i == len(below) - 1 else "├── ")
                        for i, child in reversed(list(enumerate(below))))
    return out
