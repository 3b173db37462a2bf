"""The eager baseline, undisturbed (issue 36): a candidate owns its process, and GPU work it queues
after its last synchronisation (a finalizer on an output, a second stream, a host thread) runs
while the eager reference is being timed beside it (tools/timing/blocks.py interleaves the arms),
making eager, and the speedup, look larger.

So eager is also timed on a quiet device: when the evaluator opens, before any candidate, its spare
workers' start-up finished (`measure`). The speedup is taken against the lower of the two medians
(`eager_for_speedup`): work queued by a candidate can only slow the eager arm, so it can never
raise the speedup above what the quiet device gives. Where the interleaved arm reads slower by more
than DRIFT (a disturbance, or the device itself slowing: clocks, heat), the quiet time is measured
again before the next evaluation, when no candidate of this evaluator is running (`recheck`), so
that an honest candidate is not held for long to a device that has since slowed.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from tools.judge.verdict import passed
from tools.record import TimeStats

if TYPE_CHECKING:
    from tools.judge.bench import Bench
    from tools.record import Result

DRIFT = 0.05


def measure(bench: "Bench") -> None:
    """Time eager on the device as it is now (the caller has made sure no candidate runs)."""
    from tools.timing.blocks import time_reference
    from tools.timing.plan import plan

    with bench.lock:
        bench.quiet_eager = time_reference(bench, plan(bench), "model")
        measure_floor(bench)  # the second clock's floor, on the same quiet device
        bench.recheck_quiet = False


def eager_for_speedup(bench: "Bench", result: "Result") -> TimeStats:
    """The eager time a speedup is taken against: the lower of the interleaved arm's and the quiet
    device's; a detail for the record, and a re-check asked for when they drift apart."""
    interleaved, quiet = result.eager_time, bench.quiet_eager
    if quiet is not None:
        result.eager_quiet = quiet
    if quiet is None or quiet.median_ms is None or interleaved.median_ms is None:
        return interleaved
    ratio = interleaved.median_ms / quiet.median_ms
    if ratio > 1 + DRIFT:
        bench.recheck_quiet = True
    used = interleaved if ratio <= 1 else quiet
    passed(result, "eager-baseline", f"interleaved eager {interleaved.median_ms:.4g} ms, on a quiet device "
                                     f"{quiet.median_ms:.4g} ms (x{ratio:.3f}); the lower is the baseline")
    return used


def measure_floor(bench: "Bench") -> None:
    """The second clock's floor (tools/timing/floor.py) on the device as it is now (the caller
    holds the bench's lock and has made sure no candidate runs): the reference's gated passes of 1
    and k calls, REPS rounds: their minima's floor and the k-call passes' spread. Sets `bench.quiet_passes`; where the parent's clock is unavailable here (the driver's
    stream memory operations), leaves it unset with the reason: the second clock then fails with
    the same reason for every candidate (`error`), so no candidate is paid with an unheld floor."""
    from tools.judge.verdict import Failure
    from tools.processes.reference import ReferenceLost
    from tools.timing.clocks import FIRST_CALL, REPS, burst_size, copy_ms, reference_pass
    from tools.timing.floor import QuietPasses, pass_floor
    from tools.timing.gate import GateClock
    from tools.timing.plan import plan
    from tools.wire.cuda_vmm import VmmError

    bench.quiet_passes, bench.quiet_floor_note = None, None
    eager = bench.quiet_eager.median_ms if bench.quiet_eager is not None else None
    if eager is None:
        bench.quiet_floor_note = "eager has no quiet time"
        return
    p = plan(bench)
    k = burst_size(bench.problem.input_bytes, bench.problem.output_bytes, p.pool, eager)
    handover = copy_ms(bench, bench.problem.output_bytes)
    ones: list[float] = []
    manys: list[float] = []
    try:
        gate = GateClock(bench.device)
        for rep in range(REPS):
            calls = [p.call(FIRST_CALL + rep * k + i) for i in range(k)]
            for n, into in ((1, ones), (k, manys)):
                got = reference_pass(bench, {"calls": calls[:n]}, gate)
                if isinstance(got, Failure):  # the reference alone, before any candidate: ours
                    raise ReferenceLost(f"the reference's gated pass failed on a quiet device: {got.detail}")
                into.append(got[2].gate_to_done - n * handover)
    except VmmError as exc:
        bench.quiet_floor_note = f"the parent's GPU clock is unavailable here: {exc}"
        return
    finally:
        import torch

        torch.cuda.empty_cache()  # the gate's flush buffer is not kept from the candidates
    bench.quiet_passes = QuietPasses(pass_floor(min(ones), min(manys), k, eager), max(manys) - min(manys), k)
