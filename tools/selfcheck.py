"""Whether a fault reproduces without any candidate: the evaluator's own work, with no candidate's
worker running (the evaluator killed it first: tools/evaluate.py).

A candidate owns its process and shares the device: it can fill the GPU's memory after its first
answer, or starve the reference, so that the parent or the reference fails where it never would
alone. Such a failure is the candidate's (rule `resource`), not an evaluator `error` (which a
reward masks, and a report calls "evaluate it again"). What is tried here is what an evaluation
asks of the evaluator's side: the reference's outputs on a set it has not made before, at the
problem's sizes and each held-out variant's (in float64 too, where outputs are so judged, or on
rows where they do not fit), the parent's device memory for a trial's outputs and inputs
twice over, and, when timed, a short eager timing. If all of it succeeds, the fault did not
reproduce without the candidate.

The faults themselves are let go of first (`let_go`): an exception's traceback keeps its frames'
locals alive, and on a GPU those include the parent's views of the candidate's memory (its output
and input arenas), whose mappings keep that memory allocated after the candidate's worker is
killed. Kept, they would make the retry and this check run short of memory for the candidate's
sake, and its failure read as the evaluator's.
"""
from __future__ import annotations

import gc
import secrets
import sys
import traceback
from typing import TYPE_CHECKING

from tools.judge.exact_host import host_timeout
from tools.processes.process import WorkerGone
from tools.processes.reference import ReferenceLost
from tools.problem import ProblemError
from tools.record import describe_exception

if TYPE_CHECKING:
    from tools.judge.bench import Bench

EAGER_BUDGET_S = 0.2


def let_go(*faults: BaseException) -> None:
    """Clear the locals of every finished frame in the faults' tracebacks (their causes and
    contexts too; a frame still running is left as it is), collect, and hand the parent's cached
    device memory back: what a fault held of a candidate's memory is released before anything
    runs again. The exceptions keep their messages and line numbers for the record."""
    seen: set[int] = set()
    pending: list[BaseException | None] = [*faults]
    while pending:
        exc = pending.pop()
        if exc is None or id(exc) in seen:
            continue
        seen.add(id(exc))
        traceback.clear_frames(exc.__traceback__)
        pending += [exc.__cause__, exc.__context__, getattr(exc, "cause", None)]
    gc.collect()
    torch = sys.modules.get("torch")  # never imported here for this: a CPU run may not have it loaded
    if torch is not None and torch.cuda.is_initialized():
        torch.cuda.empty_cache()


def without_candidate(bench: "Bench") -> str | None:
    """What fails of the evaluator's own work with no candidate running (one line), or None."""
    from tools.timing.blocks import time_reference
    from tools.timing.plan import plan

    seed = secrets.randbits(62)
    try:
        with bench.lock:
            for k in range(len(bench.problem.variants)):  # the held-out trials' sizes
                bench.reference_outputs(seed, f"variant:{k}", borrow=True)
            bench.reference_outputs(seed, "problem", borrow=True)
            fit = bench.reference.float64_fit  # the sizes its float64 evaluation ran at before
            if bench.exact and "problem" in fit:
                wide, why = bench.reference_wide(seed, "problem")
                if wide is None:
                    return f"the reference's float64 evaluation: {why}"
            elif bench.exact_sampled and "rows" in fit:  # the rows decide_float64 tried when the evaluator opened
                header = bench.float64_rows(seed)
                if header.get("float64_skipped"):
                    return f"the reference's float64 rows: {header['float64_skipped']}"
            if bench.exact_sampled and bench.host_ok:  # the host evaluation in use (tools/judge/exact_host.py)
                header, _ = bench.reference.checked(
                    {"op": "wide", "seed": seed, "distribution": "problem", "host": True, "positions_seed": seed,
                     "count": 1, "arena_cap": 64 << 20}, host_timeout(bench))
                if header.get("float64_skipped"):
                    return f"the reference's float64 evaluation on the host: {header['float64_skipped']}"
        if bench.device.startswith("cuda"):
            import torch

            need = 2 * (bench.problem.input_bytes + bench.problem.output_bytes)
            room = torch.empty(max(need, 1), dtype=torch.uint8, device=bench.device)
            del room
            torch.cuda.empty_cache()
        if bench.timed:
            with bench.lock:
                stats = time_reference(bench, plan(bench), "model", budget_s=EAGER_BUDGET_S,
                                       timeout=bench.options.trial_timeout)
            if stats.median_ms is None:
                return f"an eager timing: {stats.note or 'no time'}"
    except (ReferenceLost, WorkerGone, ProblemError, RuntimeError, MemoryError) as exc:  # torch's OOM is a RuntimeError
        return describe_exception(exc)
    return None

