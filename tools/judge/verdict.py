"""Where a verdict is decided: `decide()`, the one function that writes a result's verdict.

Every step of an evaluation (tools/pipeline.py) returns a `Failure` or nothing; no step
writes a verdict. A result is born pending (`pending()`: verdict `error`, "not decided"), and
decide() turns it into the first failure's verdict, or into `ok` only when every step the
pipeline lists has cleared. A step skipped, forgotten or that raised leaves the result an
evaluator fault, never an `ok` standing (fail closed).

Steps record what they measured and the checks they passed (`passed()`); the first failure
decides the verdict and its message for the model; further failed checks the same step found
(`Failure.more`) are recorded beside it and change nothing.
"""
from __future__ import annotations

import hashlib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from tools.record import Check, Result, Verdict

# how a candidate worker's failed reply is classed (a worker reports how it failed, never success)
WORKER_FAILURES = {v.value: v for v in (Verdict.COMPILE_ERROR, Verdict.RUNTIME_ERROR, Verdict.CRASHED)}
PENDING = "pending: no step has decided this evaluation"
FAULT_ADVICE = "this says nothing about the candidate: evaluate it again"


@dataclass(frozen=True)
class Failure:
    """A step's finding that the candidate fails: the check, the verdict it calls for, what was
    seen (`detail`, for a reviewer) and what the model reads (`message`; None: the detail)."""

    verdict: Verdict
    check: str
    detail: str
    message: str | None = None
    more: tuple[tuple[str, str], ...] = ()  # further failed checks of the same step: (check, detail)


def pending(source: str, **fields: Any) -> Result:
    """A new result, undecided: an evaluator fault until decide() says otherwise."""
    return Result(verdict=Verdict.ERROR, message=PENDING, source_hash=hashlib.sha256(source.encode()).hexdigest(),
                  **fields)


def passed(result: Result, check: str, detail: str = "") -> None:
    """Record a check that passed (it decides nothing)."""
    result.checks.append(Check(check, True, detail))


def decide(result: Result, failure: Failure | None, cleared: Iterable[str] = (),
           required: Sequence[str] = ()) -> Result:
    """The verdict: the failure's, if a step failed; else `ok` if every step in `required` cleared
    and no failed check stands; else an evaluator fault naming what did not clear."""
    if failure is not None:
        verdict = Verdict.REJECTED if failure.verdict is Verdict.OK else failure.verdict  # a failure is never ok
        result.checks.append(Check(failure.check, False, failure.detail))
        result.checks.extend(Check(name, False, detail) for name, detail in failure.more)
        result.verdict = verdict
        result.message = failure.message if failure.message is not None else failure.detail
        return result
    done = set(cleared)
    missing = [name for name in required if name not in done]
    standing = [c.name for c in result.checks if not c.passed]
    if missing or standing or not required:
        why = (f"the steps {', '.join(missing)} did not clear" if missing else
               f"the checks {', '.join(standing)} failed without a step failing" if standing else "no step was listed")
        result.checks.append(Check("evaluator:pipeline", False, why))
        result.verdict = Verdict.ERROR
        result.message = f"ratchet's evaluator failed ({why}); {FAULT_ADVICE}"
        return result
    result.verdict = Verdict.OK
    result.message = (f"Correct on {result.trials} trials (max abs error {_g(result.errors.max_abs)}, "
                      f"relative norm error {_g(result.errors.norm_rel)}).")
    return result


def _g(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.3g}"


def fault(result: Result, detail: str, where: str) -> Result:
    """An evaluator fault (an exception of ratchet's own) as the verdict: `error`, never the candidate's."""
    return decide(result, Failure(Verdict.ERROR, "evaluator", f"{detail}\n{where}",
                                  f"ratchet's evaluator failed ({detail}); {FAULT_ADVICE}"))


def reply_failure(reply: dict[str, Any], step: str) -> Failure | None:
    """A worker's reply as a failure of `step`: the run-time sandbox violations it reports
    (rejected), or the failure it reports (compile error, runtime error, crash); None for a
    reply that reports neither."""
    violations = [str(v) for v in reply.get("violations") or []]
    if violations:
        first, *rest = violations
        return Failure(Verdict.REJECTED, f"sandbox:{first.split(':')[0]}", first,
                       f"Rejected at run time during {step}: {first}",
                       more=tuple((f"sandbox:{v.split(':')[0]}", v) for v in rest))
    if reply.get("op") == "error":
        return Failure(WORKER_FAILURES.get(reply.get("kind"), Verdict.RUNTIME_ERROR), step, str(reply.get("message", "")))
    return None
