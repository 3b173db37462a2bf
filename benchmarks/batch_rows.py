"""What one `ratchet batch` run's rows and workspace say, for benchmarks/batch_scale.py: the rate
with every slot warm, why a run does not count, and which attempts were not ok and why."""
from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any


def warm_rate(rows: list[dict[str, Any]], slots: int) -> float | None:
    """Problems per hour once every slot is warm: the window runs from the end of the last of the
    first `slots` problems to start (each slot's cold one: its process, imports and evaluator
    workers) to the last problem's end; every other problem counts by the share of its own run
    that falls in the window. What a batch of hundreds of problems approaches, where the cold
    start of each slot is paid once."""
    timed = sorted((r["started_at"], r["finished_at"]) for r in rows if r.get("started_at") and r.get("finished_at"))
    if len(timed) != len(rows) or len(timed) <= slots:
        return None
    first, rest = timed[:slots], timed[slots:]
    begin, end = max(e for _, e in first), max(e for _, e in timed)
    if end <= begin:
        return None
    inside = sum(max(0.0, min(e, end) - max(s, begin)) / (e - s) for s, e in rest if e > s)
    return round(inside / (end - begin) * 3600, 1)


def by_check(attempts: list[dict[str, Any]]) -> dict[str, int]:
    """not_ok_attempts counted by the check that decided them (say `timing:two-clocks`)."""
    return dict(Counter(attempt["check"] for attempt in attempts))


def not_ok_attempts(workspace: Path, suite: Path, names: list[str], detail_chars: int = 600) -> list[dict[str, Any]]:
    """Each attempt whose verdict is not ok: its problem, number, the check that decided it and that
    check's detail (its first `detail_chars`). The copies all get the same honest draft, so each
    one is a verdict that noise or load decided; the detail says why even after a GPU machine's
    scratch is gone."""
    from agent.workspace.root import Workspace
    from agent.workspace.repo import WorkspaceError

    found = []
    for name in names:
        try:
            with Workspace(workspace).open_existing(suite / f"{name}.py") as repo:
                for attempt in repo.attempts():
                    if attempt.ok:
                        continue
                    failed = [c for c in repo.record(attempt).get("checks", []) if not c.get("passed", True)]
                    check = failed[0].get("name", "?") if failed else attempt.verdict.value
                    detail = str(failed[0].get("detail", "")) if failed else ""
                    found.append({"problem": name, "attempt": attempt.number, "check": check,
                                  "detail": detail[:detail_chars]})
        except WorkspaceError:  # no workspace: the problem has no row either, which faults() reports
            continue
    return found


def faults(run: dict[str, Any]) -> str:
    """Why a run does not count (a non-zero exit, a problem without a row or not finished, the wrong
    executor), or ''."""
    why = []
    if run["exit_code"]:
        why.append(f"exit {run['exit_code']}")
    if run["missing"]:
        why.append(f"no row for {', '.join(run['missing'])}")
    if run["statuses"] and run["statuses"] != ["finished"]:  # `unrecognized`: the built-in policy made no attempt
        why.append(f"statuses {', '.join(run['statuses'])}")
    if run["executors"] and run["executors"] != [run["config"].split("-")[0]]:
        why.append(f"executors {', '.join(run['executors'])}")
    return "; ".join(why)
