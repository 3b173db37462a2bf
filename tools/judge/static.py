"""The checks that need no worker: parse, "is this a candidate at all", and the static guard.

Kept apart from tools/evaluate.py so that a command refusing a file statically answers without
importing torch or starting any worker (`ratchet eval` on a file the guard refuses).
"""
from __future__ import annotations

import hashlib
import time

from tools.guard import scan as guard_mod
from tools.problem import ProblemInfo, candidate_problems
from tools.record import Result, Verdict
from tools.judge.verdict import fail, passed


def static_checks(source: str, result: Result, disabled: frozenset[str] = frozenset(),
                  single_op_family: str | None = None) -> guard_mod.Scan | None:
    """Parse and the static guard: the scan, or None with the verdict set on `result`."""
    t0 = time.monotonic()
    problem = candidate_problems(source)
    if problem:
        fail(result, Verdict.COMPILE_ERROR, "parse", problem)
        return None
    passed(result, "parse")
    scan = guard_mod.check(source, guard_mod.GuardPolicy(disabled=disabled, single_op=single_op_family))
    result.phases["guard"] = round(time.monotonic() - t0, 4)
    if scan.violations:
        first = scan.violations[0]
        more = f" (and {len(scan.violations) - 1} more)" if len(scan.violations) > 1 else ""
        for i, v in enumerate(scan.violations):
            fail(result, Verdict.REJECTED, f"guard:{v.rule}", str(v), f"Rejected by the guard, {first}{more}." if i == 0 else None)
        return None
    passed(result, "guard", f"kernels: {', '.join(scan.triton_kernels + scan.cuda_kernels) or 'load_inline'}")
    return scan


def precheck(source: str, problem: ProblemInfo, disabled: frozenset[str] = frozenset()) -> Result | None:
    """The verdict of a candidate that fails to parse, is no candidate (no class ModelNew) or is
    refused by the static guard, decided before any worker starts (the same checks, in the same
    order, as an evaluation's first steps); None for a candidate that passes them. The single-op
    rule needs the reference's ops, known once its worker ran: the evaluation applies it."""
    result = Result(verdict=Verdict.OK, message="", problem=str(problem.path), problem_hash=problem.hash,
                    source_hash=hashlib.sha256(source.encode()).hexdigest())
    started = time.monotonic()
    if static_checks(source, result, disabled, problem.single_op_family) is not None:
        return None
    result.phases["total"] = round(time.monotonic() - started, 4)
    return result
