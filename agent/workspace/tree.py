"""`ratchet log --tree`: a problem's attempts drawn as the search made them, from their trailers.

Each attempt hangs under the attempt its conversation answered (`Ratchet-Parent-Attempt`); an
attempt that answered the task itself, or was committed before lineages were recorded, is a root.
Runs are drawn apart, in the order they began, each with the lineages it used. `*` marks the
workspace's best.
"""
from __future__ import annotations

from collections.abc import Iterator

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
            parent = a.parent_attempt if a.parent_attempt in numbers else None
            children.setdefault(parent, []).append(a)
        lineages = sorted({a.lineage for a in members if a.lineage is not None})
        used = f"{len(lineages)} lineage(s)" if lineages else "lineages not recorded"
        lines.append(f"run {run_id}: {len(members)} attempt(s), {used}")
        for root in children.get(None, []):
            lines.extend(_draw(root, children, "", None))
    return lines


def _draw(node: Attempt, children: dict[int | None, list[Attempt]], indent: str, last: bool | None) -> Iterator[str]:
    branch = "" if last is None else ("└── " if last else "├── ")
    lineage = "" if node.lineage is None else f"  [lineage {node.lineage}]"
    yield f"{indent}{branch}{'*' if node.is_best else ''}{node.number} {node.summary()}{lineage}"
    below = children.get(node.number, [])
    deeper = indent + ("" if last is None else ("    " if last else "│   "))
    for i, child in enumerate(below):
        yield from _draw(child, children, deeper, i == len(below) - 1)
