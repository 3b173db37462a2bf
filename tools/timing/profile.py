"""The profile step, driven from the parent: candidate and eager reference timed in interleaved
blocks (ABBA) on the same input sets (the reference's timing pool; the parent writes a block's
sets into the candidate's memory just before the block), every timed candidate output checked
against the reference, torch.compile timed once per (problem, environment) and cached, the
roofline floor from the problem's least bytes and flops against the device's measured ceilings.

A candidate faster than the floor allows is rejected as impossible; a timed call whose output
differs from the eager reference's on the same inputs is incorrect (it did less work while
timed); work that finishes after the end event (another stream) is rejected.
"""
from __future__ import annotations

import math
import random
import secrets
import statistics
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from tools.timing import clocks
from tools.timing.baseline_cache import BaselineCache
from tools.processes.feed import feed
from tools.timing.interleave import block_order
from tools.processes.process import WorkerProcess
from tools.record import Result, TimeStats, Verdict
from tools.timing.roofline import Ceilings, build_roofline, impossible
from tools.timing.stats import SampleCollector, speedup, to_time_stats
from tools.judge.trial_checks import calls_mismatch
from tools.wire.transport import TransportError
from tools.judge.verdict import fail, passed

if TYPE_CHECKING:
    from tools.evaluate import Evaluator

MAX_POOL = 64  # input sets in the rotating pool
KEEP_BYTES = 1 << 30  # timed outputs held at once (per arm) for checking; input sets written per block
SIDE_STREAM_SLACK_MS = 0.02


@dataclass
class TimingPlan:
    pool: int  # input sets in rotation (together larger than L2 where memory allows)
    block: int  # timed calls per block and arm
    budget_s: float  # per arm
    seed: int

    def call(self, n: int) -> tuple[int, int]:
        """(slot, seed) of the n-th timed call: each pass over the pool gets new values."""
        slot, rotation = n % self.pool, n // self.pool
        return slot, random.Random(f"{self.seed}:{rotation}:{slot}").getrandbits(62)


def pool_slots(l2_bytes: int, set_bytes: int) -> int:
    """Input sets in the rotating pool: together more than twice L2, where memory allows. One set
    larger than KEEP_BYTES is one pool slot: a block then holds one call, every call gets new
    values either way, and a second multi-GB set held by the reference worker was memory the
    candidate's worker lacked (an 8 GiB problem did not fit on an 80 GiB card)."""
    if set_bytes > KEEP_BYTES:
        return 1
    return max(2, min(MAX_POOL, math.ceil(2 * l2_bytes / max(set_bytes, 1)) + 1))


def plan(ev: "Evaluator", salt: int = 0) -> TimingPlan:
    """The timing plan; `salt` varies the timed inputs (see measure())."""
    l2 = int(ev_env(ev).get("l2_bytes") or 50 << 20)
    pool = pool_slots(l2, ev.problem.input_bytes)
    # a block's input sets are distinct pool sets, all written into the candidate before the block
    block = max(1, min(10, pool, KEEP_BYTES // max(ev.problem.output_bytes, 1), KEEP_BYTES // max(ev.problem.input_bytes, 1)))
    return TimingPlan(pool=pool, block=block, budget_s=ev.options.timing_budget_s, seed=ev.seeds[0] ^ 0x71AE ^ salt)


def ev_env(ev: "Evaluator") -> dict[str, Any]:
    from tools.env import environment

    return environment(ev.device)


def measure(ev: "Evaluator", worker: WorkerProcess, result: Result) -> None:
    """Fill the timing, baseline and roofline fields of an already-correct result.

    Blocks alternate the arms (ABBA). Each arm stops sampling when its own median is known to
    +-1% (or its limit is reached); while the candidate still samples, the eager reference
    keeps running the same calls untimed, so every timed candidate output is still verified.

    Each evaluation times on inputs of its own (a fresh salt; deterministic only under an explicit
    `seed`): a candidate that stored the outputs of an earlier evaluation's timed calls (in the
    compiled-kernel files kept per source, tools/processes/builds.py) and replayed them would be timed on
    inputs it has not seen, and its outputs checked against them (an attacker helper's idea)."""
    p = plan(ev, salt=0 if ev.options.seed is not None else secrets.randbits(62))
    timeout = ev.options.trial_timeout
    arms = {"candidate": worker, "eager": ev.reference}
    collectors = {a: SampleCollector(budget_s=p.budget_s, max_samples=ev.options.timing_max_samples) for a in arms}
    gaps: dict[str, list[float]] = {a: [] for a in arms}
    unwarmed = set(arms)  # each arm warms up on its first request, on inputs not used for timing
    if p.pool == 1:  # multi-GB sets: the warm-up's set alone, then the timed ones in its place (one set held)
        if not _warm_alone(ev, worker, p.call(10**9)[1], result):
            return
        unwarmed.discard("candidate")
    n, block = 0, 0
    while not all(c.done() for c in collectors.values()):
        calls = [p.call(n + i) for i in range(p.block)]
        candidate_timed = not collectors["candidate"].done()
        replies = {}
        # the candidate's sets are written first: feeding uses the reference worker, whose arena
        # must not change between its timed reply and the verification below
        fed = _fed(ev, worker, calls, p.call(10**9)[1] if "candidate" in unwarmed else None) if candidate_timed else {}
        for arm in block_order(block, tuple(arms)):
            timed = not collectors[arm].done()
            if not timed and not (arm == "eager" and candidate_timed):
                continue
            warmup_seed = p.call(10**9)[1] if arm in unwarmed else None
            unwarmed.discard(arm)
            msg = {"op": "time", "calls": calls, "keep_outputs": candidate_timed, "untimed": not timed,
                   "warmup_seed": warmup_seed, "arena_cap": ev.arena_cap(2 * p.block, outputs_only=True)}
            if arm == "candidate":
                msg.update(fed)
            header, payload = arms[arm].request(msg, timeout)
            if not ev.verdict_from_reply(header, "timing", result):
                return
            samples, synced = header.get("samples"), header.get("synced")
            if len(samples or []) != (len(calls) if timed else 0) or len(synced or []) != len(samples or []):
                fail(result, Verdict.REJECTED, "timing:reply", f"the {arm} worker answered {len(calls)} timed calls "
                     f"with {len(samples or [])} samples", "Rejected: the timing reply does not match the request.")
                return
            collectors[arm].extend(samples)
            gaps[arm].extend(s - e for s, e in zip(synced, samples))
            if candidate_timed:
                try:
                    replies[arm] = arms[arm].outputs(header, payload)
                except (TransportError, KeyError, TypeError, ValueError) as exc:
                    fail(result, Verdict.REJECTED, "timing:outputs", f"malformed outputs from the {arm} worker: {exc}")
                    return
        if candidate_timed and not _verify(ev, replies, n, result):
            return
        n += p.block
        block += 1
    result.candidate_time = to_time_stats(collectors["candidate"])
    result.eager_time = to_time_stats(collectors["eager"])
    if not _same_stream(result, gaps) or not clocks.check(ev, worker, p, result):
        return
    result.speedup_vs_eager = speedup(result.eager_time, result.candidate_time)
    result.compile_time = compile_baseline(ev, p)
    if result.compile_time.measured:
        result.speedup_vs_compile = speedup(result.compile_time, result.candidate_time)
    roofline(ev, result)


def _warm_alone(ev: "Evaluator", worker: WorkerProcess, seed: int, result: Result) -> bool:
    """The candidate's warm-up as a request of its own, on a set not used for timing: a block's
    set is then written where the warm-up's was, and the worker's input arena holds one set, not
    two (8 GiB more for a problem of 8 GiB inputs). False when the verdict is set."""
    trees, _ = feed(ev, worker, [(None, seed, "problem")])
    header, _ = worker.request({"op": "time", "calls": [], "warmup": trees[0], "keep_outputs": False},
                               ev.options.trial_timeout)
    if not ev.verdict_from_reply(header, "timing", result):
        return False
    if header.get("samples"):
        return fail(result, Verdict.REJECTED, "timing:reply", "the candidate's worker answered a warm-up with samples",
                    "Rejected: the timing reply does not match the request.")
    return True


def _fed(ev: "Evaluator", worker: WorkerProcess, calls: list[tuple[int, int]], warmup_seed: int | None) -> dict[str, Any]:
    """Write a block's input sets (and the warm-up set) into the candidate; the request's fields."""
    sets = [(slot, seed, "problem") for slot, seed in calls]
    if warmup_seed is not None:
        sets.insert(0, (None, warmup_seed, "problem"))
    trees, _ = feed(ev, worker, sets)
    warmup = trees.pop(0) if warmup_seed is not None else None
    return {"calls": trees, "warmup_seed": None, "warmup": warmup}


def _verify(ev: "Evaluator", replies: dict[str, Any], first: int, result: Result) -> bool:
    """Each timed candidate output against the eager reference's output on the same inputs."""
    found = calls_mismatch(replies["eager"], replies["candidate"], ev.options.tolerances, first, "timed")
    if found is None:
        return True
    kind, verdict, message = found
    if kind == "count":
        return fail(result, verdict, "timing:outputs", message, "Rejected: the timing reply does not match the request.")
    return fail(result, verdict, "timing:verified", message)


def _same_stream(result: Result, gaps: dict[str, list[float]]) -> bool:
    """Reject work that outlives the end event: after a device-wide sync the candidate's gap
    must match the eager reference's (host wake-up latency, measured in the same run)."""
    excess = statistics.median(gaps["candidate"]) - statistics.median(gaps["eager"])
    allowed = max(SIDE_STREAM_SLACK_MS, 0.1 * (result.candidate_time.median_ms or 0.0))
    detail = f"work finished {excess:.4g} ms after the end event beyond the reference's gap (allowed {allowed:.3g} ms)"
    if excess > allowed:
        return fail(result, Verdict.REJECTED, "timing:one-stream", detail,
                    f"Rejected (rule streams-graphs): {detail}; all work must run on the current stream.")
    return passed(result, "timing:one-stream", detail)


def time_reference(ev: "Evaluator", p: TimingPlan, fn: str) -> TimeStats:
    """The reference alone ("model": eager, "compiled": torch.compile), same protocol."""
    collector = SampleCollector(budget_s=p.budget_s, max_samples=ev.options.timing_max_samples)
    n, warm = 0, p.call(10**9)[1]
    while not collector.done():
        calls = [p.call(n + i) for i in range(p.block)]
        header, _ = ev.reference.request({"op": "time", "fn": fn, "calls": calls, "warmup_seed": warm},
                                         max(ev.options.trial_timeout, ev.options.compile_timeout))
        if header.get("op") == "error":
            return TimeStats(note=f"{'torch.compile' if fn == 'compiled' else 'eager'} failed: {header.get('message', '')[:300]}")
        warm = None
        collector.extend(header["samples"])
        n += p.block
    return to_time_stats(collector)


def compile_baseline(ev: "Evaluator", p: TimingPlan) -> TimeStats:
    env = ev_env(ev)
    cache = BaselineCache(ev.cache_dir / "baselines")
    key = f"{ev.problem.hash}/{ev.options.precision}"  # a TF32 time is not an fp32 one
    cached = cache.get_compile_time(key, env)
    if cached is not None:
        return cached
    stats = time_reference(ev, p, "compiled")
    if stats.measured:
        cache.put_compile_time(key, env, stats)
    return stats


def baselines(ev: "Evaluator") -> dict[str, Any]:
    """What a model should know before its first attempt: eager and torch.compile times and the
    roofline floor (bytes and flops alone where nothing can be timed)."""
    prob = ev.problem
    out: dict[str, Any] = {"bytes_moved": prob.input_bytes + prob.output_bytes + prob.param_bytes,
                           "flops": prob.flops, "eager_ms": None, "compile_ms": None, "floor_ms": None,
                           "measured": False}
    if not (ev.options.timing and ev.device.startswith("cuda")):
        return out
    p = plan(ev)
    eager, compiled = time_reference(ev, p, "model"), compile_baseline(ev, p)
    roof = build_roofline(out["bytes_moved"], prob.flops, prob.dtype, ceilings(ev))
    out.update(eager_ms=eager.median_ms, compile_ms=compiled.median_ms if compiled.measured else None,
               floor_ms=roof.floor_ms, measured=eager.measured)
    return out


def ceilings(ev: "Evaluator") -> Ceilings:
    env = ev_env(ev)
    cache = BaselineCache(ev.cache_dir / "baselines")
    found = cache.get_ceilings(env)
    if found is None:
        header, _ = ev.reference.request({"op": "ceilings"}, 120)
        found = Ceilings.from_dict(header["ceilings"])
        cache.put_ceilings(env, found)
    return found


def roofline(ev: "Evaluator", result: Result) -> None:
    prob = ev.problem
    bytes_moved = prob.input_bytes + prob.output_bytes + prob.param_bytes
    roof = build_roofline(bytes_moved, prob.flops, prob.dtype, ceilings(ev), result.candidate_time.median_ms)
    result.roofline = roof
    if roof.floor_ms and impossible(result.candidate_time.median_ms, roof.floor_ms):
        msg = (f"measured {result.candidate_time.median_ms:.4g} ms, below the roofline floor of {roof.floor_ms:.4g} ms "
               f"({bytes_moved} bytes, {prob.flops} flops): faster than the hardware allows, so the work was not done")
        fail(result, Verdict.REJECTED, "roofline", msg, f"Rejected (rule roofline): {msg}.")
    else:
        passed(result, "roofline")


def own_kernel_share(ev: "Evaluator", worker: WorkerProcess, names: list[str], result: Result) -> None:
    trees, _ = feed(ev, worker, [(None, ev.seeds[0], "problem")])
    header, _ = worker.request({"op": "profile", "inputs": trees[0], "own": names}, ev.options.trial_timeout)
    if ev.verdict_from_reply(header, "profile", result):
        result.own_kernel_share = header.get("own_share")


def unavailable(result: Result, why: str) -> None:
    for stats in (result.candidate_time, result.eager_time, result.compile_time):
        stats.note = why
    result.roofline.note = why
