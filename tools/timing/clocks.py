"""The second clock: the parent's own, against the time a candidate's worker reports.

A candidate owns its whole process, so the samples its worker reports (CUDA events read in that
process) can be forged by native code, and a timed block's later inputs can be read ahead by its
first call. The parent times passes of k calls back to back on the GPU instead, from its own
stream (tools/timing/gate.py): its clock starts before it copies the pass's input sets into the
worker (the candidate cannot start on inputs it does not have) and stops once it holds its own
copy of the outputs, taken on the GPU the moment the worker's stream says it is done (work
finished later is either on the clock or missing from the copy). Every output of a pass is
checked, in that copy, against the eager reference on the same inputs, so the work can be neither
skipped nor cached; no host time is on the clock, since the worker queues its calls while the
parent's stream is still busy-waiting. The copies are charged at their event-timed duration, at
most COPY_SLACK times what the bandwidth the parent measured on its own buffers when the
evaluator opened predicts, and the worker's hand-over of each output into its arena at that
bandwidth; what is left can be made longer by a candidate but never shorter than its work.

A pass costs a fixed amount besides its calls (the handshake and the second context's first
kernel: 0.28 ms on an H200). The eager reference (trusted) runs gated passes of 1 and k calls in
the same run: its slope and what is left over, at most what a quiet device gave
(tools/timing/floor.py). The candidate's own passes of 1 and k calls give its own, kept within
INTERCEPT_ALLOWANCE_MS of the reference's, so padding its one-call pass gains a candidate at
most that much over k calls.

A disagreement, the parent's time per call above RATIO times the worker's median plus
GAP_ALLOWANCE_MS plus the noise of the reference's passes, rejects the candidate under the rule
`two-clocks`: a forged median, and a median that reading ahead made the pad's. It is read after
REPS rounds of passes; while it is over, up to MORE_REPS rounds more are measured, one at a time,
and the minima taken over all of them (noise only adds time; the allowance stays what the first
REPS rounds set). docs/integrity.md has the measurements these constants come from and the
shortest kernel at which a forged 1.2x is caught.
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
from tools.timing.floor import QuietPasses, held, held_noise, pass_floor
from tools.timing.paid import paid_time
from tools.wire.transport import TransportError

if TYPE_CHECKING:
    from tools.judge.bench import Bench
    from tools.judge.evaluation import Evaluation
    from tools.timing.gate import GateClock, Reading
    from tools.timing.plan import TimingPlan

REPS = 3  # passes per arm; the smallest wall of each is used (noise only ever adds time)
# rounds added, one at a time, while the parent's clock still reads above the allowed: on a busy host
# (two Ray slots starting workers) an honest swish kernel at k = 2 read 0.55-0.70 ms per call after
# three rounds against 0.54-0.58 allowed, in 4 of 80 attempts; more passes only bring each minimum
# nearer the true wall, and the allowance stays what the first REPS rounds set (docs/integrity.md)
MORE_REPS = 6
MORE_TIME = 3.0  # ... and while they have taken less than this many times what the first REPS rounds took
RATIO = 1.05
# back to back, a call may take this much longer than its isolated sample (the gap between two
# calls' kernels); the gated pass hides host work as the worker's pre-roll does (tools/timing/gate.py)
GAP_ALLOWANCE_MS = 0.005
# what a candidate's pass may cost besides its calls beyond the reference's (the same handshake).
# Measured on an H200 over 66 evaluations of two_clocks' candidates (2^12-2^24 elements, two runs):
# an honest candidate's own cost exceeded the reference's by at most 0.011 ms (tiny kernels; within
# +-0.005 ms from 2^18 up). It was 0.05 ms until a candidate that reads a pass's later input sets
# in its first call (which pads its one-call pass with them) read 0.0098 ms per call against a true
# 0.0138 at k = 9 and passed (tests/eval/test_timing_gpu.py, READS_AHEAD)
INTERCEPT_ALLOWANCE_MS = 0.015
# the reference's spread counted as noise, at most this (ms) plus this fraction of eager's time per call:
# on a quiet H200 the spread measured 0.00003-0.0006 ms per call (elementwise 2^14-2^22, a 1024^2 matmul)
NOISE_MAX_MS = 0.001
NOISE_MAX_FRACTION = 0.02
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
    quiet: QuietPasses | None = None  # the reference's passes on a quiet device (tools/timing/floor.py)
    copies: list[str] = field(default_factory=list)  # per pass: "in+out timed/predicted" (for the record)
    # per pass: the gate's opening to the worker's DONE, at the busy-wait it took (ms), and whether
    # the host's time was on the clock ("gate to done@busy-wait")
    phases: list[str] = field(default_factory=list)

    def describe(self) -> str:
        def ms(xs: list[float]) -> str:
            return "/".join(f"{x:.3g}" for x in xs) or "-"
        q = self.quiet
        quiet = "-" if q is None else f"{q.floor_ms:.3g}, spread {q.spread_ms:.3g} at x{q.k}"
        return (f"passes in ms: candidate {ms(self.candidate)}, candidate x1 {ms(self.candidate_one)}, "
                f"eager x1 {ms(self.eager_one)}, eager {ms(self.eager_k)}; quiet floor {quiet}; "
                f"copies charged {self.copy:.3g} "
                f"(timed {self.copy_timed:.3g}), hand-over {self.handover:.3g} per call; copies per pass, "
                f"in+out timed/predicted: {', '.join(self.copies) or '-'}; gate to done@busy-wait: "
                f"{', '.join(self.phases) or '-'}")

    def per_call(self, k: int, eager_median_ms: float) -> tuple[float, float]:
        """(candidate's time per call by the parent's clock, the pass's own cost subtracted).

        That cost is the candidate's own (from its passes of 1 and k calls) kept between the
        eager reference's (trusted, measured in the same run, at most what it was on a quiet
        device: tools/timing/floor.py) and that plus INTERCEPT_ALLOWANCE_MS: padding its single
        call to shrink its slope gains a candidate at most the allowance."""
        floor = held(pass_floor(min(self.eager_one), min(self.eager_k), k, eager_median_ms), self.quiet)
        overhead = floor + INTERCEPT_ALLOWANCE_MS
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

    def noise(self, k: int, eager_median_ms: float) -> float:
        """Spread of the eager arm's first REPS k-call passes, per call: how far an honest pass may
        wander (the rounds added while in doubt sharpen the minima, never widen the allowance), at
        most NOISE_MAX_MS plus NOISE_MAX_FRACTION of eager's own time per call: those passes run
        while the candidate's worker exists, and GPU work it leaves queued (a finalizer's 30 ms spin
        after its pass) slows them and widened the allowance 200-fold (an attacker on an H200: a
        median forged 3x on a 0.06 ms matmul passed, noise 0.14 ms per call); and at most what a
        quiet device's passes spread (tools/timing/floor.py `held_noise`)."""
        first = self.eager_k[:REPS]
        beside = min((max(first) - min(first)) / k, NOISE_MAX_MS + NOISE_MAX_FRACTION * eager_median_ms)
        return held_noise(beside, self.quiet, k)

    def judge(self, k: int, median_ms: float, eager_median_ms: float) -> tuple[float, float, float]:
        """(the parent's time per call, the most it may be for a worker median of `median_ms`, the
        request overhead subtracted)."""
        parent, overhead = self.per_call(k, eager_median_ms)
        return parent, RATIO * median_ms + GAP_ALLOWANCE_MS + self.noise(k, eager_median_ms), overhead


def two_clocks(bench: "Bench", evaluation: "Evaluation") -> Failure | None:
    """Step: compare the parent's clock with the worker's median."""
    if not bench.timed:
        return None
    assert evaluation.worker is not None and evaluation.plan is not None, "the blocks step runs first"
    from tools.wire.cuda_vmm import VmmError

    try:
        with evaluation.phase("timing", "timing_clocks"):
            return _check(bench, evaluation.worker, evaluation.plan, evaluation)
    except VmmError as exc:  # the parent's own driver calls (tools/wire/stream_ops.py): this machine's fault
        return Failure(Verdict.ERROR, "timing:two-clocks", f"the parent's GPU clock is unavailable here: {exc}")
    finally:  # the copies of the outputs (up to KEEP_BYTES, or one output when larger) must not stay
        import torch  # reserved by the parent, out of the candidates' reach

        torch.cuda.empty_cache()


def _check(bench: "Bench", worker: WorkerProcess, plan: "TimingPlan", evaluation: "Evaluation") -> Failure | None:
    result = evaluation.result
    k = burst_size(bench.problem.input_bytes, bench.problem.output_bytes, plan.pool, result.candidate_time.median_ms or 0.0)
    passes = Passes([], [], [], [], handover=copy_ms(bench, bench.problem.output_bytes), quiet=bench.quiet_passes)
    room = _output_room(bench, k)  # the parent's copy of the outputs: allocated before any clock starts
    from tools.timing.gate import GateClock

    gate = GateClock(bench.device)
    median = result.candidate_time.median_ms or 0.0
    eager_median = result.eager_time.median_ms or 0.0
    found: list[Failure] = []

    def measure(rep: int) -> bool:
        failure = _round(bench, worker, plan, k, rep, room, passes, gate)
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
              + f"; {passes.describe()}"
              + (f"; floor not held: {bench.quiet_floor_note}" if bench.quiet_floor_note else "") + ")")
    if parent > allowed:
        return Failure(Verdict.REJECTED, "timing:two-clocks", detail,
                       f"Rejected (rule two-clocks): {detail}. The times the worker reported are shorter than "
                       "the work takes: either they were altered, or each call spends far more time launching "
                       "on the host than running on the GPU.")
    passed(result, "timing:two-clocks", detail)
    # what the verdict pays: the clock outside the candidate, where it reads more than RATIO x the worker's
    # median (within that, honest kernels' two clocks differ by noise: paying the higher of two noisy
    # readings made an honest kernel's speedup repeat within 3.5%, not 2%, on an H200)
    if median and parent > RATIO * median:
        evaluation.reported_time = result.candidate_time
        result.candidate_time = paid_time(result.candidate_time, parent)
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
           passes: Passes, gate: "GateClock") -> Failure | None:
    """One round of gated passes on fresh pool calls: the candidate's k calls, the reference's one
    and k, the candidate's one (its outputs checked against the reference's)."""
    calls = [plan.call(FIRST_CALL + rep * k + i) for i in range(k)]
    many = _candidate_pass(bench, worker, calls, room, passes.handover, gate)
    if isinstance(many, Failure):
        return many
    passes.candidate.append(many.ms)
    passes.copy, passes.copy_timed = many.charged, many.timed
    passes.copies.append(many.copies)
    passes.phases.append(many.phases)
    one = reference_pass(bench, {"calls": calls[:1]}, gate) if k > 1 else None
    if isinstance(one, Failure):
        return one
    eager = reference_pass(bench, {"calls": calls}, gate)
    if isinstance(eager, Failure):
        return eager
    one = one or eager  # one call per pass: the same pass
    passes.eager_one.append(one[2].gate_to_done - passes.handover)
    passes.eager_k.append(eager[2].gate_to_done - k * passes.handover)
    if (failure := _verify(bench, many.outputs, eager, rep * k)) is not None:
        return failure
    if k > 1:  # the same pass with one call: whatever a pass costs besides its calls cancels in the slope
        single = _candidate_pass(bench, worker, calls[:1], room, passes.handover, gate)
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
    phases: str  # "gate to done, busy-wait, covered", for the record


def _candidate_pass(bench: "Bench", worker: WorkerProcess, calls: list[tuple[int, int]], room: Any,
                    handover: float, gate: "GateClock") -> CandidatePass | Failure:
    """One gated pass of the candidate: its input sets copied in, the calls back to back, the
    parent's own copy of the outputs, all on the parent's stream (tools/timing/gate.py). The
    outputs are copied from where the worker's arena holds them; a reply that announces a new
    arena (the first pass that needs more room) makes the copy stale: the pass is run again once."""
    from tools.processes.feed import staged
    from tools.wire.transport import decode

    from tools.processes.feed import Set

    sets: list[Set] = [(slot, seed, "problem") for slot, seed in calls]
    timeout = bench.options.trial_timeout
    msg = {"op": "time", "burst": True, "keep_outputs": True, "warmup": None,
           "arena_cap": bench.arena_cap(2 * max(len(calls), 1), outputs_only=True)}
    for _ in range(2):
        with bench.lock:  # the reference's arena holds the sets until the copy is done
            trees, _, views = staged(bench.reference, worker, sets, device=bench.device,
                                     arena_cap=bench.arena_cap(len(sets), inputs_only=True), timeout=timeout)
            arena = worker.arena
            n = min(arena.numel(), room.numel()) if arena is not None and room is not None else 0
            out = (room[:n], arena[:n]) if n else None
            try:
                header, payload, reading = gate.run(worker, worker.request, {**msg, "calls": trees}, len(calls),
                                                    timeout, views, out)
            except TimeoutError as exc:
                return Failure(Verdict.TIMEOUT, "timing:two-clocks", str(exc))
        if (failure := reply_failure(header, "timing:two-clocks")) is not None:
            return failure
        if header.get("calls") != len(calls):
            return Failure(Verdict.REJECTED, "timing:two-clocks", f"a burst of {len(calls)} calls was answered with "
                           f"{header.get('calls')!r}", "Rejected: the worker's reply does not match the request.")
        if out is not None and not header.get("arena"):
            break
        worker.map_arena(header)  # mapped now; the next pass copies from it
    else:
        return Failure(Verdict.REJECTED, "timing:two-clocks", "the worker moved its outputs to new memory in two "
                       "timed passes running", "Rejected: the worker's reply does not match the request.")
    try:
        outs = decode(header["tree"], payload, out[0])
    except (TransportError, KeyError, TypeError, ValueError) as exc:
        return Failure(Verdict.REJECTED, "timing:two-clocks", f"malformed outputs of back-to-back calls: {exc}")
    copied_in = views[0].numel() if views is not None else 0
    timed = reading.copy_in + reading.copy_out
    predicted = copy_ms(bench, copied_in + n)
    charged = min(timed, COPY_SLACK * predicted) if timed else predicted
    return CandidatePass(reading.clock - charged - len(calls) * handover, outs, charged, timed,
                         f"{reading.copy_in:.3g}+{reading.copy_out:.3g}/{predicted:.3g}",
                         f"{reading.gate_to_done:.4g}@{reading.spin_ms:.3g}{'' if reading.covered else ' host on clock'}")


def burst_size(input_bytes: int, output_bytes: int, pool: int, median_ms: float) -> int:
    """Calls per pass: distinct pool sets (`pool` of them), as many as KEEP_BYTES of inputs and of
    outputs allow, BURST_MAX at most, and about PASS_MS of work by the worker's median."""
    from tools.timing.plan import KEEP_BYTES

    by_memory = min(KEEP_BYTES // max(output_bytes, 1), KEEP_BYTES // max(input_bytes, 1))
    by_time = int(PASS_MS / max(median_ms, 1e-3))
    return max(1, min(BURST_MAX, pool, by_memory, by_time))


def reference_pass(bench: "Bench", fields: dict[str, Any],
             gate: "GateClock") -> tuple[dict[str, Any], bytes, "Reading"] | Failure:
    """A gated pass of the eager reference on its own pool sets: (header, payload, reading)."""
    msg = {"op": "time", "burst": True, "keep_outputs": True,
           "arena_cap": bench.arena_cap(2 * max(len(fields["calls"]), 1), outputs_only=True), **fields}
    # a pass of the reference that never ends raises (TimeoutError): a fault while the candidate's
    # worker exists, judged by tools/evaluate.py (evaluated again; rule `resource` if it follows the candidate)
    header, payload, reading = gate.run(bench.reference.proc, bench.reference.request, msg, len(fields["calls"]),
                                        bench.options.trial_timeout)
    if (failure := reply_failure(header, "timing:two-clocks")) is not None:
        return failure
    # new memory the reply announced is mapped already (Reference.request)
    if header.get("calls") != len(fields["calls"]):
        return Failure(Verdict.REJECTED, "timing:two-clocks", f"a burst of {len(fields['calls'])} calls was "
                       f"answered with {header.get('calls')!r}", "Rejected: the worker's reply does not match the request.")
    return header, payload, reading


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
