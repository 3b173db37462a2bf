"""Where a verdict is decided: the one place that turns the first failed check into the result's
verdict and its message for the model.

Every check of an evaluation (parse, guard, build, each trial, the integrity checks, timing,
roofline) reports through `fail()` or `passed()`; nothing else assigns a verdict. The first
failed check decides; later ones are recorded (their detail helps a reviewer) but change nothing.
"""
from __future__ import annotations

from tools.record import Check, Result, Verdict


def fail(result: Result, verdict: Verdict, check: str, detail: str, message: str | None = None) -> bool:
    """Record a failed check; if it is the first, it decides the verdict. Returns False (so a
    caller can `return fail(...)`). A failed check never means `ok`."""
    if verdict is Verdict.OK:
        verdict = Verdict.REJECTED
    decided = any(not c.passed for c in result.checks)
    result.checks.append(Check(check, False, detail))
    if not decided:
        result.verdict = verdict
        result.message = message if message is not None else detail
    return False


def passed(result: Result, check: str, detail: str = "") -> bool:
    result.checks.append(Check(check, True, detail))
    return True


def accept(result: Result, message: str) -> None:
    """Every check passed: the candidate computes the reference's function."""
    if not any(not c.passed for c in result.checks):
        result.verdict = Verdict.OK
        result.message = message


def failed(result: Result) -> bool:
    return any(not c.passed for c in result.checks)
