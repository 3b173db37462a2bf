"""The second clock: the parent's own, against the time a candidate's worker reports.

A candidate owns its whole process, so the samples its worker reports (CUDA events read in that
process) can be forged by native code. The parent cannot time kernels in another process, but it
can time requests: after the timed blocks, the worker runs one call per input set back to back
(no events, no per-call synchronization, no L2 flush; `burst` in tools/worker/worker.py), and the
parent reads its own clock from just before it copies those input sets into the worker (the
candidate cannot start on inputs it does not have) until it holds its own copy of the outputs
(taken the moment the reply arrives, on its own stream: work the candidate finishes after
answering is either inside that clock or missing from the copy). Every output of these calls is
checked, in that copy, against the eager reference on the same inputs, so the work cannot be
skipped, and no two calls share inputs, so it cannot be cached; the calls are ordered on one
stream, so they cannot overlap. Hence the parent's clock, less the copies and the request's own
overhead, can be made longer by a candidate but never shorter than the work it did.

The overhead of a request (the pipe both ways, two synchronizations, handing the outputs over) is
measured on the eager reference, which is trusted, in the same run: passes of 1 and k calls give
its per-call cost and what is left over. A sandboxed candidate worker answers more slowly, so the
candidate's own passes of 1 and k calls give its overhead, kept between the reference's and that
plus REQUEST_ALLOWANCE_MS. Three copies of a pass are charged: the parent's copy of the inputs
in and of the outputs out (each its own event-timed duration, at most COPY_SLACK times what the
bandwidth the parent measured on its own buffers when the evaluator opened predicts, so that a
candidate hogging the GPU during them gains little), and the worker's hand-over of each output
into its arena (at that bandwidth: it happens in the candidate's process, where nothing can be
timed). The hand-over is charged on every pass, the reference's included, so that what is left
per call is the calls' own work.

A disagreement, the parent's time per call above RATIO times the worker's median plus
HOST_ALLOWANCE_MS (the worker's protocol hides up to 0.2 ms of host work per call behind a GPU
busy-wait; back-to-back calls do not) plus the noise of the reference's passes, rejects the
candidate under the rule `two-clocks`. It is read after REPS rounds of passes; while it is over,
up to MORE_REPS rounds more are measured, one at a time, and the minima taken over all of them
(noise only adds time, so more passes only bring a minimum nearer the true wall; the allowance
stays what the first REPS rounds set). docs/integrity.md has the measurements these constants
come from and the smallest kernel time at which a forged 1.5x is caught.
"""
from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from tools.judge.trial_checks import calls_mismatch
from tools.judge.verdict import Failure, passed, reply_failure
from tools.processes.process import WorkerProcess
from tools.record import Verdict
from tools.wire.transport import TransportError

if TYPE_CHECKING:
    from tools.judge.bench import Bench
    from tools.judge.evaluation import Evaluation
    from tools.processes.reference import Reference
    from tools.timing.plan import TimingPlan

REPS = 3  # passes per arm; the smallest wall of each is used (noise only ever adds time)
# rounds added, one at a time, while the parent's clock still reads above the allowed: on a busy host
# (two Ray slots starting workers) an honest swish kernel at k = 2 read 0.55-0.70 ms per call after
# three rounds against 0.54-0.58 allowed, in 4 of 80 attempts; more passes only bring each minimum
# nearer the true wall, and the allowance stays what the first REPS rounds set (docs/integrity.md)
MORE_REPS = 6
MORE_TIME = 3.0  # ... and while they have taken less than this many times what the first REPS rounds took
RATIO = 1.1
# the worker's 0.2 ms pre-roll hides host work from its samples; back to back shows it (measured
# on an H200: an honest kernel with nine launches per call, 0.14-0.22 ms between the two clocks)
HOST_ALLOWANCE_MS = 0.3
# what a sandboxed candidate worker's request costs beyond the reference's (measured: 0.35-0.5 ms)
REQUEST_ALLOWANCE_MS = 0.6
BURST_MAX = 32  # calls per pass, at most
PASS_MS = 20.0  # ... and about this much work per pass, by the worker's median
FIRST_CALL = 10**6  # pool calls from here on: seeds not used by the timed blocks
# the parent's own copies in a pass are charged at their event-timed duration, at most this many
# times what the bandwidth measured at open predicts (the copies in a pass go between two other
# processes' memory and may be slower than the probe's; docs/integrity.md has the measurement)
COPY_SLACK = 1.5


@dataclass
class Passes:
    candidate: list[float]  # parent's clock for k candidate calls, copy excluded (ms)
    candidate_one: list[float]  # ... a pass of one call, the same steps (its own overhead, clamped: padding lowers a slope)
    eager_one: list[float]  # ... one eager call
    eager_k: list[float]  # ... k eager calls
    copy: float = 0.0  # ms charged for the copies of the last k-call pass (inputs in, outputs out)
    copy_timed: float = 0.0  # ... what those copies took by the parent's events
    handover: float = 0.0  # ms charged per call for the worker's hand-over of its outputs
    copies: list[str] = field(default_factory=list)  # per pass: "in+out timed/predicted" (for the record)
    # per pass, where its clock went besides the copies: the parent's host work before sending, the
    # request (sent to reply), the parent's host work after the reply ("before+request+after", ms)
    phases: list[str] = field(default_factory=list)

    def describe(self) -> str:
        def ms(xs: list[float]) -> str:
            return "/".join(f"{x:.3g}" for x in xs) or "-"
        return (f"passes in ms: candidate {ms(self.candidate)}, candidate x1 {ms(self.candidate_one)}, "
                f"eager x1 {ms(self.eager_one)}, eager {ms(self.eager_k)}; copies charged {self.copy:.3g} "
                f"(timed {self.copy_timed:.3g}), hand-over {self.handover:.3g} per call; copies per pass, "
                f"in+out timed/predicted: {', '.join(self.copies) or '-'}; the rest of each pass, host before + "
                f"request + host after: {', '.join(self.phases) or '-'}")

    def per_call(self, k: int, eager_median_ms: float) -> tuple[float, float]:
        """(candidate's time per call by the parent's clock, the request overhead subtracted).

        The overhead is the candidate's own (from its passes of 1 and k calls) kept between the
        eager reference's (trusted, measured in the same run) and that plus REQUEST_ALLOWANCE_MS:
        padding its single call to shrink its slope gains a candidate at most the allowance."""
        one, many = min(self.eager_one), min(self.eager_k)
        slope = (many - one) / (k - 1) if k > 1 else eager_median_ms
        floor = max(0.0, one - max(slope, 0.0))
        overhead = floor + REQUEST_ALLOWANCE_MS
        if k > 1 and self.candidate_one:
            c_one, c_many = min(self.candidate_one), min(self.candidate)
            own = c_one - max((c_many - c_one) / (k - 1), 0.0)
            overhead = min(max(own, floor), overhead)
        return (min(self.candidate) - overhead) / k, overhead

    def own_slope(self, k: int) -> float | None:
        """The candidate's time per call from its own passes of 1 and k calls (for the record)."""
        if k < 2 or not self.candidate_one:
            return None
        return (min(self.candidate) - min(self.candidate_one)) / (k - 1)

    def noise(self, k: int) -> float:
        """Spread of the eager arm's first REPS k-call passes, per call: how far an honest pass may
        wander (the rounds added while in doubt sharpen the minima, never widen the allowance)."""
        first = self.eager_k[:REPS]
        return (max(first) - min(first)) / k

    def judge(self, k: int, median_ms: float, eager_median_ms: float) -> tuple[float, float, float]:
        """(the parent's time per call, the most it may be for a worker median of `median_ms`, the
        request overhead subtracted)."""
        parent, overhead = self.per_call(k, eager_median_ms)
        return parent, RATIO * median_ms + HOST_ALLOWANCE_MS + self.noise(k), overhead


def two_clocks(bench: "Bench", evaluation: "Evaluation") -> Failure | None:
    """Step: compare the parent's clock with the worker's median."""
    if not bench.timed:
        return None
    assert evaluation.worker is not None and evaluation.plan is not None, "the blocks step runs first"
    try:
        with evaluation.phase("timing"):
            return _check(bench, evaluation.worker, evaluation.plan, evaluation)
    finally:  # the copies of the outputs (up to KEEP_BYTES, or one output when larger) must not stay
        import torch  # reserved by the parent, out of the candidates' reach

        torch.cuda.empty_cache()


def _check(bench: "Bench", worker: WorkerProcess, plan: "TimingPlan", evaluation: "Evaluation") -> Failure | None:
    result = evaluation.result
    k = burst_size(bench.problem.input_bytes, bench.problem.output_bytes, plan.pool, result.candidate_time.median_ms or 0.0)
    passes = Passes([], [], [], [], handover=copy_ms(bench, bench.problem.output_bytes))
    room = _output_room(bench, k)  # the parent's copy of the outputs: allocated before any clock starts
    median = result.candidate_time.median_ms or 0.0
    eager_median = result.eager_time.median_ms or 0.0
    found: list[Failure] = []

    def measure(rep: int) -> bool:
        failure = _round(bench, worker, plan, k, rep, room, passes)
        if failure is not None:
            found.append(failure)
        return failure is None

    reading = settle(passes, k, median, eager_median, measure)
    if reading is None:
        return found[0]
    parent, allowed, overhead, first = reading
    slope = passes.own_slope(k)
    rounds = len(passes.candidate)
    detail = (f"parent's clock {parent:.4g} ms per call back to back, worker's median {median:.4g} ms "
              f"(allowed {allowed:.4g} ms; {k} calls per pass, request overhead {overhead:.4g} ms"
              + (f", slope of its own passes {slope:.4g} ms" if slope is not None else "")
              + (f"; {rounds} rounds, {first:.4g} ms after {REPS}" if first is not None else "")
              + f"; {passes.describe()})")
    if parent > allowed:
        return Failure(Verdict.REJECTED, "timing:two-clocks", detail,
                       f"Rejected (rule two-clocks): {detail}. The times the worker reported are shorter than "
                       "the work takes: either they were altered, or each call spends far more time launching "
                       "on the host than running on the GPU.")
    passed(result, "timing:two-clocks", detail)
    return None


def settle(passes: Passes, k: int, median_ms: float, eager_median_ms: float, measure: Callable[[int], bool],
           clock: Callable[[], float] = time.monotonic) -> tuple[float, float, float, float | None] | None:
    """Measure rounds (`measure(rep)` adds one to `passes`; False: the verdict is set, None is
    returned) until, from the REPS-th on, the parent's time per call is within the allowed, or
    REPS + MORE_REPS rounds are spent, or the added rounds have taken MORE_TIME times what the
    first REPS took (a worker that stalls its answers does not hold the check for nine rounds of
    trial timeouts). Returns (parent's time per call, allowed, overhead, the parent's time after
    REPS rounds if more were needed, else None)."""
    first: float | None = None
    began = clock()
    limit = float("inf")
    for rep in range(REPS + MORE_REPS):
        if not measure(rep):
            return None
        if rep + 1 < REPS:
            continue
        parent, allowed, overhead = passes.judge(k, median_ms, eager_median_ms)
        if parent <= allowed:
            break
        now = clock()
        if first is None:
            first = parent
            limit = now + MORE_TIME * (now - began)
        elif now >= limit:
            break
    return parent, allowed, overhead, first


def _round(bench: "Bench", worker: WorkerProcess, plan: "TimingPlan", k: int, rep: int, room: Any,
           passes: Passes) -> Failure | None:
    """One round of passes on fresh pool calls: the candidate's k calls, the reference's one and k,
    the candidate's one (its outputs checked against the reference's)."""
    calls = [plan.call(FIRST_CALL + rep * k + i) for i in range(k)]
    many = _candidate_pass(bench, worker, calls, room, passes.handover)
    if isinstance(many, Failure):
        return many
    passes.candidate.append(many.ms)
    passes.copy, passes.copy_timed = many.charged, many.timed
    passes.copies.append(many.copies)
    passes.phases.append(many.phases)
    one = _request(bench, bench.reference, {"calls": calls[:1]}) if k > 1 else None
    if isinstance(one, Failure):
        return one
    eager = _request(bench, bench.reference, {"calls": calls})
    if isinstance(eager, Failure):
        return eager
    one = one or eager  # one call per pass: the same pass
    passes.eager_one.append(one[3] - passes.handover)
    passes.eager_k.append(eager[3] - k * passes.handover)
    if (failure := _verify(bench, many.outputs, eager, rep * k)) is not None:
        return failure
    if k > 1:  # the same pass with one call: whatever a pass costs besides its calls cancels in the slope
        single = _candidate_pass(bench, worker, calls[:1], room, passes.handover)
        if isinstance(single, Failure):
            return single
        passes.candidate_one.append(single.ms)
    return None


@dataclass
class CandidatePass:
    """One pass of the candidate, as the parent's clock saw it."""
    ms: float  # the parent's clock for the pass, less the charged copies and hand-overs
    outputs: Any
    charged: float  # ms charged for the parent's copies in and out
    timed: float  # ... what those copies took by the parent's events
    copies: str  # "in+out timed/predicted", for the record
    phases: str  # "host before + request + host after", ms, the copies excluded, for the record


def _candidate_pass(bench: "Bench", worker: WorkerProcess, calls: list[tuple[int, int]], room: Any,
                    handover: float) -> CandidatePass | Failure:
    """One pass of the candidate: its input sets copied in, the calls back to back, the parent's
    own copy of the outputs. The k-call pass and the one-call pass
    take the same steps, so that the parent's own work around a pass (the copies' launches and
    synchronizations, mapping the reply) is in both and cancels in the candidate's slope rather
    than counting as work of its calls."""
    stamps: dict[str, float] = {}
    trees, _ = bench.feed(worker, [(slot, seed, "problem") for slot, seed in calls], stamps)
    start = stamps.get("copy_start", time.perf_counter())
    cand = _request(bench, worker, {"calls": trees, "warmup": None})
    if isinstance(cand, Failure):
        return cand
    try:
        outs, taken = _take_outputs(bench, worker, cand, room)
    except (TransportError, KeyError, TypeError, ValueError) as exc:
        return Failure(Verdict.REJECTED, "timing:two-clocks", f"malformed outputs of back-to-back calls: {exc}")
    end = time.perf_counter()
    copy_in, copy_out = stamps.get("copy_ms", 0.0), taken.get("copy_ms", 0.0)
    timed = copy_in + copy_out
    predicted = copy_ms(bench, stamps.get("copied", 0.0) + taken.get("copied", 0.0))
    charged = min(timed, COPY_SLACK * predicted) if timed else predicted
    replied, request_ms = cand[2], cand[3]
    before = (replied - start) * 1e3 - request_ms - copy_in
    after = (end - replied) * 1e3 - copy_out
    return CandidatePass((end - start) * 1e3 - charged - len(calls) * handover, outs, charged, timed,
                         f"{copy_in:.3g}+{copy_out:.3g}/{predicted:.3g}", f"{before:.3g}+{request_ms:.3g}+{after:.3g}")


def burst_size(input_bytes: int, output_bytes: int, pool: int, median_ms: float) -> int:
    """Calls per pass: distinct pool sets (`pool` of them), as many as KEEP_BYTES of inputs and of
    outputs allow, BURST_MAX at most, and about PASS_MS of work by the worker's median."""
    from tools.timing.plan import KEEP_BYTES

    by_memory = min(KEEP_BYTES // max(output_bytes, 1), KEEP_BYTES // max(input_bytes, 1))
    by_time = int(PASS_MS / max(median_ms, 1e-3))
    return max(1, min(BURST_MAX, pool, by_memory, by_time))


def _request(bench: "Bench", proc: "WorkerProcess | Reference",
             fields: dict[str, Any]) -> tuple[dict[str, Any], bytes, float, float] | Failure:
    """A burst request: (header, payload, parent's clock at the reply, ms from sending to reply)."""
    msg = {"op": "time", "burst": True, "keep_outputs": True,
           "arena_cap": bench.arena_cap(2 * max(len(fields["calls"]), 1), outputs_only=True), **fields}
    sent = time.perf_counter()
    header, payload = proc.request(msg, bench.options.trial_timeout)
    done = time.perf_counter()
    if (failure := reply_failure(header, "timing:two-clocks")) is not None:
        return failure
    if header.get("calls") != len(fields["calls"]):
        return Failure(Verdict.REJECTED, "timing:two-clocks", f"a burst of {len(fields['calls'])} calls was "
                       f"answered with {header.get('calls')!r}", "Rejected: the worker's reply does not match the request.")
    return header, payload, done, (done - sent) * 1e3


def _output_room(bench: "Bench", k: int) -> Any:
    """A buffer for the parent's copy of k calls' outputs (with the arena's alignment per tensor),
    or None on the CPU. Taken before the passes: allocating it inside a pass would put the
    allocator's time (cudaMalloc of up to KEEP_BYTES) inside the parent's clock and inside the
    copy's events, both charged to an honest candidate (measured: copies timed at 1.1-2x the
    bandwidth's prediction, rejecting honest kernels; docs/integrity.md)."""
    if not bench.device.startswith("cuda"):
        return None
    import torch

    from tools.wire.transport import ALIGN

    tensors = max(len(bench.problem.outputs), 1)
    return torch.empty(k * (bench.problem.output_bytes + 2 * ALIGN * tensors), dtype=torch.uint8, device=bench.device)


def _take_outputs(bench: "Bench", worker: WorkerProcess, cand: tuple[Any, ...],
                  room: Any = None) -> tuple[Any, dict[str, float]]:
    """The parent's own copy of a burst's outputs, taken on its own stream right after the reply
    and synchronized: the values checked are those the outputs held when the clock stopped.
    Returns the outputs (views into the copy, in `room` when it is large enough) and what the
    copy moved and took."""
    from tools.processes.feed import arena_used
    from tools.wire.transport import decode

    arena = worker.map_arena(cand[0])
    if arena is None or not bench.device.startswith("cuda"):  # CPU: the payload is already ours
        return worker.outputs(cand[0], cand[1]), {}
    used = min(arena_used(cand[0]["tree"]), arena.numel())
    target = room[:used] if room is not None and room.numel() >= used else None
    copy, ms = timed_copy(arena[:used], bench.device, target)
    return decode(cand[0]["tree"], cand[1], copy), {"copied": float(used), "copy_ms": ms}


def timed_copy(source: Any, device: str, target: Any = None) -> tuple[Any, float]:
    """A synchronized copy of `source` on the parent's stream (into `target` when given, else a
    new tensor), and its duration by CUDA events (ms)."""
    import torch

    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    if target is None:
        copy = source.clone()
    else:
        copy = target.copy_(source)
    end.record()
    end.synchronize()
    return copy, start.elapsed_time(end)


def _verify(bench: "Bench", outs: Any, eager: tuple[Any, ...], first: int) -> Failure | None:
    try:
        refs = bench.reference.outputs(eager[0], eager[1])
    except (TransportError, KeyError, TypeError, ValueError) as exc:
        return Failure(Verdict.REJECTED, "timing:two-clocks", f"malformed outputs of back-to-back calls: {exc}")
    found = calls_mismatch(refs, outs, bench.options.tolerances, first, "back-to-back")
    if found is None:
        return None
    _, verdict, message = found
    return Failure(verdict, "timing:two-clocks", message)


def copy_ms(bench: "Bench", nbytes: float) -> float:
    """What copying `nbytes` device to device costs the parent, at the bandwidth it measured on
    its own buffers when the evaluator opened, before any candidate could share the GPU with it
    (a candidate busy on the GPU during a copy only lengthens what it is charged)."""
    return max(nbytes, 0.0) * (bench.copy_ms_per_byte or 0.0)
