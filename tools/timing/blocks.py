"""The timing steps driven from the parent: candidate and eager reference timed in interleaved
blocks (ABBA) on the same input sets (the reference's timing pool; the parent writes a block's
sets into the candidate's memory just before the block), every timed candidate output checked
against the reference; then whether the candidate's work finished on the timed stream. The
second clock (tools/timing/clocks.py), torch.compile and the roofline floor
(tools/timing/baselines.py) follow.

A timed call whose output differs from the eager reference's on the same inputs is incorrect (it
did less work while timed); work that finishes after the end event (another stream) is rejected.
"""
from __future__ import annotations

import secrets
import statistics
from typing import TYPE_CHECKING, Any

from tools.judge.trial_checks import calls_mismatch
from tools.timing.timed_exact import judge_timed, timed_final
from tools.judge.verdict import Failure, passed, reply_failure
from tools.processes.process import WorkerProcess
from tools.record import Result, TimeStats, Verdict
from tools.timing.interleave import block_order
from tools.timing.plan import TimingPlan, plan
from tools.timing.stats import SampleCollector, to_time_stats
from tools.wire.transport import TransportError

if TYPE_CHECKING:
    from tools.judge.bench import Bench
    from tools.judge.evaluation import Evaluation

SIDE_STREAM_SLACK_MS = 0.02


def unavailable(result: Result, why: str) -> None:
    for stats in (result.candidate_time, result.eager_time, result.compile_time):
        stats.note = why
    result.roofline.note = why


def blocks(bench: "Bench", evaluation: "Evaluation") -> Failure | None:
    """Step: the timed blocks. Without a GPU, or with timing off, the record says why nothing was timed.

    Blocks alternate the arms (ABBA). Each arm stops sampling when its own median is known to
    +-1% (or its limit is reached); while the candidate still samples, the eager reference
    keeps running the same calls untimed, so every timed candidate output is still verified.

    Each evaluation times on inputs of its own (a fresh salt; deterministic only under an explicit
    `seed`): a candidate that stored the outputs of an earlier evaluation's timed calls (in the
    compiled-kernel files kept per source, tools/processes/builds.py) and replayed them would be
    timed on inputs it has not seen, and its outputs checked against them (an attacker helper's idea)."""
    if not bench.options.timing:
        unavailable(evaluation.result, "not measured (timing switched off)")
        return None
    if not bench.device.startswith("cuda"):
        unavailable(evaluation.result, "unavailable: no GPU (CPU runs use Triton's interpreter; times would mean nothing)")
        return None
    with evaluation.phase("timing", "timing_blocks"):
        return _blocks(bench, evaluation)


def _blocks(bench: "Bench", evaluation: "Evaluation") -> Failure | None:
    assert evaluation.worker is not None
    worker, result = evaluation.worker, evaluation.result
    p = evaluation.plan = plan(bench, salt=0 if bench.options.seed is not None else secrets.randbits(62))
    timeout = bench.options.trial_timeout
    arms: dict[str, Any] = {"candidate": worker, "eager": bench.reference}
    collectors = {a: SampleCollector(budget_s=p.budget_s, max_samples=bench.options.timing_max_samples) for a in arms}
    gaps: dict[str, list[float]] = {a: [] for a in arms}
    evaluation.gaps = gaps
    unwarmed = set(arms)  # each arm warms up on its first request, on inputs not used for timing
    if p.pool == 1:  # multi-GB sets: the warm-up's set alone, then the timed ones in its place (one set held)
        if (failure := _warm_alone(bench, worker, p.call(10**9)[1])) is not None:
            return failure
        unwarmed.discard("candidate")
    n, block = 0, 0
    while not all(c.done() for c in collectors.values()):
        calls = [p.call(n + i) for i in range(p.block)]
        candidate_timed = not collectors["candidate"].done()
        replies = {}
        # the candidate's sets are written first: feeding uses the reference worker, whose arena
        # must not change between its timed reply and the verification below
        fed = _fed(bench, worker, calls, p.call(10**9)[1] if "candidate" in unwarmed else None) if candidate_timed else {}
        for arm in block_order(block, tuple(arms)):
            timed = not collectors[arm].done()
            if not timed and not (arm == "eager" and candidate_timed):
                continue
            warmup_seed = p.call(10**9)[1] if arm in unwarmed else None
            unwarmed.discard(arm)
            msg = {"op": "time", "calls": calls, "keep_outputs": candidate_timed, "untimed": not timed,
                   "warmup_seed": warmup_seed, "arena_cap": bench.arena_cap(2 * p.block, outputs_only=True)}
            if arm == "candidate":
                msg.update(fed)
            header, payload = arms[arm].request(msg, timeout)
            if (failure := reply_failure(header, "timing")) is not None:
                return failure
            samples, synced = header.get("samples") or [], header.get("synced") or []
            if len(samples) != (len(calls) if timed else 0) or len(synced) != len(samples):
                return Failure(Verdict.REJECTED, "timing:reply", f"the {arm} worker answered {len(calls)} timed calls "
                               f"with {len(samples)} samples", "Rejected: the timing reply does not match the request.")
            if (bad := _bad_samples(samples, synced, timeout)) is not None:
                return Failure(Verdict.REJECTED, "timing:reply", f"the {arm} worker's samples: {bad}",
                               "Rejected: the timing reply does not match the request.")
            collectors[arm].extend(samples)
            gaps[arm].extend(s - e for s, e in zip(synced, samples))
            if candidate_timed:
                try:
                    replies[arm] = arms[arm].outputs(header, payload)
                except (TransportError, KeyError, TypeError, ValueError) as exc:
                    return Failure(Verdict.REJECTED, "timing:outputs", f"malformed outputs from the {arm} worker: {exc}")
        if candidate_timed and (failure := _verify(bench, replies, n)) is not None:
            return failure
        if candidate_timed and (failure := judge_timed(bench, evaluation, calls, replies, n, block,
                                                       last=collectors["candidate"].done())) is not None:
            return failure
        n += p.block
        block += 1
    if (failure := timed_final(bench, evaluation)) is not None:
        return failure
    result.candidate_time = to_time_stats(collectors["candidate"])
    result.eager_time = to_time_stats(collectors["eager"])
    return None


def _bad_samples(samples: list[Any], synced: list[Any], timeout: float) -> str | None:
    """Why a timing reply's numbers are not times of its calls (each a positive number of ms below
    the request's timeout, the device-wide sync no earlier than the end event), or None."""
    for sample, sync in zip(samples, synced):
        for value in (sample, sync):
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value < timeout * 1e3:
                return f"{value!r} is not a time in ms between 0 and {timeout * 1e3:.0f}"
        if sync < sample:
            return f"the device-wide sync ({sync!r} ms) came before the end event ({sample!r} ms)"
    return None


def _warm_alone(bench: "Bench", worker: WorkerProcess, seed: int) -> Failure | None:
    """The candidate's warm-up as a request of its own, on a set not used for timing: a block's
    set is then written where the warm-up's was, and the worker's input arena holds one set, not
    two (8 GiB more for a problem of 8 GiB inputs)."""
    trees, _ = bench.feed(worker, [(None, seed, "problem")])
    header, _ = worker.request({"op": "time", "calls": [], "warmup": trees[0], "keep_outputs": False},
                               bench.options.trial_timeout)
    if (failure := reply_failure(header, "timing")) is not None:
        return failure
    if header.get("samples"):
        return Failure(Verdict.REJECTED, "timing:reply", "the candidate's worker answered a warm-up with samples",
                       "Rejected: the timing reply does not match the request.")
    return None


def _fed(bench: "Bench", worker: WorkerProcess, calls: list[tuple[int, int]], warmup_seed: int | None) -> dict[str, Any]:
    """Write a block's input sets (and the warm-up set) into the candidate; the request's fields."""
    sets: list[tuple[int | None, int, str]] = [(slot, seed, "problem") for slot, seed in calls]
    if warmup_seed is not None:
        sets.insert(0, (None, warmup_seed, "problem"))
    trees, _ = bench.feed(worker, sets)
    warmup = trees.pop(0) if warmup_seed is not None else None
    return {"calls": trees, "warmup_seed": None, "warmup": warmup}


def _verify(bench: "Bench", replies: dict[str, Any], first: int) -> Failure | None:
    """Each timed candidate output against the eager reference's output on the same inputs."""
    found = calls_mismatch(replies["eager"], replies["candidate"], bench.options.tolerances, first, "timed")
    if found is None:
        return None
    kind, verdict, message = found
    if kind == "count":
        return Failure(verdict, "timing:outputs", message, "Rejected: the timing reply does not match the request.")
    return Failure(verdict, "timing:verified", message)


def one_stream(bench: "Bench", evaluation: "Evaluation") -> Failure | None:
    """Step: reject work that outlives the end event: after a device-wide sync the candidate's gap
    must match the eager reference's (host wake-up latency, measured in the same run)."""
    if not bench.timed:
        return None
    result = evaluation.result
    with evaluation.phase("timing"):
        excess = statistics.median(evaluation.gaps["candidate"]) - statistics.median(evaluation.gaps["eager"])
        allowed = max(SIDE_STREAM_SLACK_MS, 0.1 * (result.candidate_time.median_ms or 0.0))
        detail = f"work finished {excess:.4g} ms after the end event beyond the reference's gap (allowed {allowed:.3g} ms)"
        if excess > allowed:
            return Failure(Verdict.REJECTED, "timing:one-stream", detail,
                           f"Rejected (rule streams-graphs): {detail}; all work must run on the current stream.")
        passed(result, "timing:one-stream", detail)
        return None


def time_reference(bench: "Bench", p: TimingPlan, fn: str, budget_s: float | None = None,
                   timeout: float | None = None) -> TimeStats:
    """The reference alone ("model": eager, "compiled": torch.compile), same protocol; `budget_s`
    and `timeout` (per request) shorten the plan's budget and torch.compile's first-call limit."""
    budget = p.budget_s if budget_s is None else min(budget_s, p.budget_s)
    if timeout is None:
        timeout = max(bench.options.trial_timeout, bench.options.compile_timeout)
    collector = SampleCollector(budget_s=budget, max_samples=bench.options.timing_max_samples)
    n = 0
    warm: int | None = p.call(10**9)[1]  # a warm-up set on the first request only
    while not collector.done():
        calls = [p.call(n + i) for i in range(p.block)]
        header, _ = bench.reference.request({"op": "time", "fn": fn, "calls": calls, "warmup_seed": warm}, timeout)
        if header.get("op") == "error":
            return TimeStats(note=f"{'torch.compile' if fn == 'compiled' else 'eager'} failed: {header.get('message', '')[:300]}")
        warm = None
        collector.extend(header["samples"])
        n += p.block
    return to_time_stats(collector)
