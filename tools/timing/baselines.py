"""What a candidate's time is compared with: the eager reference (timed beside it, in
tools/timing/blocks.py, and on a quiet device: tools/timing/quiet.py), torch.compile (timed once per problem, precision and environment, and
kept on disk), and the roofline floor (the problem's least bytes and flops against the device's
ceilings, measured once per device). A candidate faster than the floor allows is rejected as
impossible.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, cast

from tools.judge.verdict import Failure, passed
from tools.record import TimeStats, Verdict
from tools.timing.baseline_cache import BaselineCache
from tools.timing.blocks import time_reference
from tools.timing.plan import TimingPlan, plan
from tools.timing.quiet import eager_for_speedup
from tools.timing.roofline import Ceilings, build_roofline, impossible
from tools.timing.stats import speedup

if TYPE_CHECKING:
    from tools.judge.bench import Bench
    from tools.judge.evaluation import Evaluation


def compile_baseline(bench: "Bench", p: TimingPlan) -> TimeStats:
    """torch.compile's time on this problem: cached per problem, precision and environment."""
    key = f"{bench.problem.hash}/{bench.options.precision}"  # a TF32 time is not an fp32 one
    cache = BaselineCache(bench.cache_dir / "baselines")
    cached = cache.get_compile_time(key, bench.environment)
    if cached is not None:
        return cached
    stats = time_reference(bench, p, "compiled")
    if stats.measured:
        cache.put_compile_time(key, bench.environment, stats)
    return stats


def speedups(bench: "Bench", evaluation: "Evaluation") -> Failure | None:
    """Step: the speedups against eager (timed beside the candidate) and torch.compile."""
    if not bench.timed:
        return None
    assert evaluation.plan is not None, "the blocks step runs first"
    result = evaluation.result
    with evaluation.phase("timing", "timing_baselines"):
        result.eager_time = eager_for_speedup(bench, result)  # never slower than a quiet device's (quiet.py)
        result.speedup_vs_eager = speedup(result.eager_time, result.candidate_time)
        result.compile_time = compile_baseline(bench, evaluation.plan)
        if result.compile_time.measured:
            result.speedup_vs_compile = speedup(result.compile_time, result.candidate_time)
    return None


def ceilings(bench: "Bench") -> Ceilings:
    """The device's measured copy bandwidth and matrix rates (measured once, kept on disk)."""
    cache = BaselineCache(bench.cache_dir / "baselines")
    found = cache.get_ceilings(bench.environment)
    if found is None:
        header, _ = bench.reference.request({"op": "ceilings"}, 120)
        found = Ceilings.from_dict(header["ceilings"])
        cache.put_ceilings(bench.environment, found)
    return found


def roofline(bench: "Bench", evaluation: "Evaluation") -> Failure | None:
    """Step: the roofline floor and the fraction of it achieved; a time below it is impossible."""
    if not bench.timed:
        return None
    prob, result = bench.problem, evaluation.result
    with evaluation.phase("timing"):
        bytes_moved = prob.input_bytes + prob.output_bytes + prob.param_bytes
        roof = build_roofline(bytes_moved, prob.flops, prob.dtype, ceilings(bench), result.candidate_time.median_ms)
        result.roofline = roof
        reported = (evaluation.reported_time or result.candidate_time).median_ms  # what its worker said, paid or not
        if roof.floor_ms and impossible(cast(float, reported), roof.floor_ms):  # timed: a median
            msg = (f"measured {reported:.4g} ms, below the roofline floor of {roof.floor_ms:.4g} ms "
                   f"({bytes_moved} bytes, {prob.flops} flops): faster than the hardware allows, so the work was not done")
            return Failure(Verdict.REJECTED, "roofline", msg, f"Rejected (rule roofline): {msg}.")
        passed(result, "roofline")
        return None


def baselines(bench: "Bench") -> dict[str, Any]:
    """What a model should know before its first attempt: eager and torch.compile times and the
    roofline floor (bytes and flops alone where nothing can be timed)."""
    prob = bench.problem
    out: dict[str, Any] = {"bytes_moved": prob.input_bytes + prob.output_bytes + prob.param_bytes,
                           "flops": prob.flops, "eager_ms": None, "compile_ms": None, "floor_ms": None,
                           "measured": False}
    if not bench.timed:
        return out
    p = plan(bench)
    eager = bench.quiet_eager if bench.quiet_eager is not None else time_reference(bench, p, "model")
    compiled = compile_baseline(bench, p)
    roof = build_roofline(out["bytes_moved"], prob.flops, prob.dtype, ceilings(bench))
    out.update(eager_ms=eager.median_ms, compile_ms=compiled.median_ms if compiled.measured else None,
               floor_ms=roof.floor_ms, measured=eager.measured)
    return out
