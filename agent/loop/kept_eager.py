"""Kept eager: what ratchet says when its best kernel is not faster than eager PyTorch.

The best rule (agent.workspace.attempt.beats) still keeps the fastest correct attempt as the
workspace's best, so that it can be inspected (`ratchet show PROBLEM --best`). Whether that best
beats eager PyTorch beyond noise is a second rule, agent.workspace.attempt.beats_eager, with the
same margin; where both times were measured and it does not, the problem is "kept eager": the
reference stays the answer, and

- `ratchet best` says "no kernel faster than PyTorch" and exits EXIT_KEPT_EAGER, or with
  `--reference` writes the reference itself as a drop-in `ModelNew` (`reference_as_model_new`);
- the end of `ratchet optimize` says so;
- `ratchet report` counts the problem as 1.0x against eager, never as a slowdown.

The result record and the RL reward keep the honest ratio. Where either time was not measured
(a CPU run) nothing is said about eager: the untimed best is treated as before.
"""
from __future__ import annotations

import ast
import dataclasses
from typing import Any

from agent.workspace.attempt import Attempt, beats_eager, format_ms
from tools.record import TimeStats

NO_FASTER = "no kernel faster than PyTorch"
MODEL_NEW = "ModelNew"


def eager_time(record: dict[str, Any]) -> TimeStats:
    """Eager PyTorch's time as an attempt's result record holds it (`eager_time`)."""
    stats = record.get("eager_time") or {}
    return TimeStats(**{f.name: stats[f.name] for f in dataclasses.fields(TimeStats) if f.name in stats})


def kept_eager(attempt: Attempt, record: dict[str, Any]) -> bool:
    """Both times measured, and the attempt not faster than eager beyond noise (record: the attempt's)."""
    return beats_eager(attempt, eager_time(record)) is False


def speedup(attempt: Attempt, record: dict[str, Any]) -> float | None:
    """The attempt's speedup against eager as recorded (else eager's median over the attempt's)."""
    if attempt.speedup_vs_eager is not None:
        return attempt.speedup_vs_eager
    eager = eager_time(record).median_ms
    return eager / attempt.median_ms if eager and attempt.median_ms else None


def _interval(median: float | None, low: float | None, high: float | None) -> str:
    text = "n/a" if median is None else f"{format_ms(median)} ms"
    if low is not None and high is not None:
        text += f", 95% interval {format_ms(low)}-{format_ms(high)}"
    return text


def no_faster_line(attempt: Attempt, record: dict[str, Any]) -> str:
    """One line: the best attempt, its ratio to eager and both timings (for a kept-eager problem)."""
    ratio = speedup(attempt, record)
    eager = eager_time(record)
    figure = "n/a" if ratio is None else f"{ratio:.2f}x"
    return (f"{NO_FASTER}: the best attempt, {attempt.number}, is {figure} eager "
            f"({_interval(attempt.median_ms, attempt.ci_low_ms, attempt.ci_high_ms)}; eager "
            f"{_interval(eager.median_ms, eager.ci_low_ms, eager.ci_high_ms)}), not faster beyond noise")


def reference_as_model_new(reference: str, *, entry: str = "Model", why: str = NO_FASTER) -> str:
    """The problem's reference source with a `ModelNew` that is its `entry` class, unchanged: a
    drop-in file computing exactly the reference. ValueError (one line) if the source does not
    parse, has no top-level class `entry`, or already defines `ModelNew`."""
    try:
        tree = ast.parse(reference)
    except SyntaxError as exc:
        raise ValueError(f"the reference does not parse (line {exc.lineno}: {exc.msg})") from None
    defined = {node.name for node in tree.body if isinstance(node, ast.ClassDef)}
    assigned = {t.id for node in tree.body if isinstance(node, ast.Assign) for t in node.targets
                if isinstance(t, ast.Name)}
    if entry not in defined:
        raise ValueError(f"the reference defines no top-level class {entry!r} (name the reference class with --entry)")
    if MODEL_NEW in defined | assigned:
        raise ValueError(f"the reference already defines {MODEL_NEW}")
    why = " ".join(why.split())
    body = reference if reference.endswith("\n") else reference + "\n"
    return (f"{body}\n\n"
            f"# Written by `ratchet best --reference`: {why}.\n"
            f"# The drop-in is the reference itself: eager PyTorch.\n"
            f"class {MODEL_NEW}({entry}):\n"
            f'    """The reference {entry}, unchanged: no kernel was faster than eager PyTorch beyond noise."""\n')
