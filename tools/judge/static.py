"""The checks that need no worker: parse, "is this a candidate at all", and the static guard.

Light on purpose (no torch): a command refusing a file statically answers without importing
torch or starting any worker (`ratchet eval` on a file the guard refuses: `precheck`).
"""
from __future__ import annotations

import time
from typing import TYPE_CHECKING

from tools.guard import scan as guard
from tools.judge.verdict import Failure, decide, passed, pending
from tools.problem import ProblemInfo, candidate_problems
from tools.record import Result, Verdict

# a source longer than this is refused at once: escaped as JSON it could pass the worker's 16 MiB
# frame header, and the worker would die reading it (a `crashed` that says nothing of the cause)
MAX_CANDIDATE_CHARS = 4 << 20

if TYPE_CHECKING:
    from tools.judge.bench import Bench
    from tools.judge.evaluation import Evaluation


def static(bench: "Bench", evaluation: "Evaluation") -> Failure | None:
    """Step: parse the source and apply the static guard (its scan is kept for later steps)."""
    failure, evaluation.scan = scan(evaluation.source, evaluation.result, bench.options.disabled_rules, bench.problem.single_op_family)
    return failure


def scan(source: str, result: Result, disabled: frozenset[str] = frozenset(),
         single_op_family: str | None = None) -> tuple[Failure | None, guard.Scan | None]:
    """Parse and the static guard: (None, the scan), or (the failure, None)."""
    t0 = time.monotonic()
    if len(source) > MAX_CANDIDATE_CHARS:  # it would not fit a request frame to the worker (tools/wire/protocol.py)
        return Failure(Verdict.COMPILE_ERROR, "parse", f"the source is {len(source)} characters; the evaluator takes at "
                       f"most {MAX_CANDIDATE_CHARS}"), None
    try:  # the source is the candidate's: anything reading it fails on its account, never ours
        problem = candidate_problems(source)
        if problem:
            return Failure(Verdict.COMPILE_ERROR, "parse", problem), None
        passed(result, "parse")
        found = guard.check(source, guard.GuardPolicy(disabled=disabled, single_op=single_op_family))
    except (RecursionError, MemoryError, ValueError, OverflowError) as exc:
        why = f"the source could not be read ({type(exc).__name__}: {str(exc)[:120]}): nested too deeply or too large"
        return Failure(Verdict.REJECTED, "guard:unreadable", why, f"Rejected by the guard: {why}."), None
    result.phases["guard"] = round(time.monotonic() - t0, 4)
    if found.violations:
        first, *rest = found.violations
        more = f" (and {len(rest)} more)" if rest else ""
        return Failure(Verdict.REJECTED, f"guard:{first.rule}", str(first), f"Rejected by the guard, {first}{more}.",
                       more=tuple((f"guard:{v.rule}", str(v)) for v in rest)), None
    passed(result, "guard", f"kernels: {', '.join(found.triton_kernels + found.cuda_kernels) or 'load_inline'}")
    return None, found


def precheck(source: str, problem: ProblemInfo, disabled: frozenset[str] = frozenset()) -> Result | None:
    """The verdict of a candidate that fails to parse, is no candidate (no class ModelNew) or is
    refused by the static guard, decided before any worker starts (the same checks, in the same
    order, as an evaluation's first step); None for a candidate that passes them. The single-op
    rule needs the reference's ops, known once its worker ran: the evaluation applies it."""
    result = pending(source, problem=str(problem.path), problem_hash=problem.hash)
    started = time.monotonic()
    failure, _ = scan(source, result, disabled, problem.single_op_family)
    if failure is None:
        return None
    result.phases["total"] = round(time.monotonic() - started, 4)
    return decide(result, failure)
