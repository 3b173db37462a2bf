"""Timed outputs judged against float64 too (issue 35, docs/precision.md): a kernel must not be
exact on the trials' distributions and cheap on the timed one.

After a block's outputs pass the float32 comparison with eager's (tools/timing/blocks.py), a
block chosen at random (`chosen`: the k-th with probability SPREAD/(k+1), at most MAX_SAMPLES per
evaluation, and the candidate's last block always; decided after the block's calls returned, by
the parent's own secret randomness; seeded only under an explicit `EvalOptions.seed`, as the
timing plan is) has one of its calls,
also chosen at random, evaluated by the reference in float64 on the same pool set; the
candidate's output of that call is held to the same bound as a trial's (tools/judge/exact.py),
eager's output of the same call being the yardstick. Small outputs are pooled over the sampled
calls and judged when the timing ends (timed_final). Each of 1/2 up to 8 samples, as before, left
every block after about the sixteenth unjudged: a kernel exact on its first twenty calls and TF32
after them was paid for TF32 (an attacker helper, stop 53). With SPREAD/(k+1), a kernel exact only
on its first m of K blocks is missed with probability about ((m+1)/(K+1))^SPREAD, and not at all
where it is cheap on the last block.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

from tools.judge.exact import POOL_BELOW
from tools.judge.exact_host import judge_host
from tools.judge.exact_rows import RowSample
from tools.judge.verdict import Failure
from tools.processes.reference import clone_tree
from tools.record import Verdict

if TYPE_CHECKING:
    from tools.judge.bench import Bench
    from tools.judge.evaluation import Evaluation

MAX_SAMPLES = 12  # timed calls judged against float64 per evaluation, at most (the last block's besides)
SPREAD = 2.0  # the k-th block (from 0) is judged with probability SPREAD / (k + 1): about 2 ln(blocks) in all
KEY = "timed"


def chosen(rng: Any, block: int, last: bool, sampled: int) -> bool:
    """Whether a block has a call judged: the candidate's last timed block always; another with
    probability SPREAD/(block+1) while fewer than MAX_SAMPLES were (`rng`: the parent's secret
    random.Random)."""
    if last:
        return True
    return sampled < MAX_SAMPLES and rng.random() < SPREAD / (block + 1)


def judge_timed(bench: "Bench", evaluation: "Evaluation", calls: list[tuple[int, int]], replies: dict[str, Any],
                first: int, block: int, last: bool) -> Failure | None:
    """Maybe judge one call of this block (the `block`-th; `last`: the candidate's last timed one)
    against float64 (see the module's docstring); its seconds are also recorded apart, as the phase
    "float64_timed" (inside "timing")."""
    with evaluation.phase("float64_timed"):
        return _judge_timed(bench, evaluation, calls, replies, first, block, last)


def _judge_timed(bench: "Bench", evaluation: "Evaluation", calls: list[tuple[int, int]], replies: dict[str, Any],
                 first: int, block: int, last: bool) -> Failure | None:
    judge = evaluation.exact_for(bench)
    if judge is None:
        return None
    rng = judge.random(bench)
    if not chosen(rng, block, last, judge.timed_samples):
        return None
    i = rng.randrange(len(calls))
    eager, cand = replies["eager"][i], replies["candidate"][i]
    slot, seed = calls[i]
    if bench.exact_sampled:  # too large for a whole float64 evaluation: rows of it
        judge.timed_samples += 1
        sample = RowSample(bench, {"slot": slot, "seed": seed}, host=True, defer=True)
        why = sample.observe(judge, KEY, eager, cand)
        if sample.pending is not None:  # outputs its rows did not judge: one such call, drawn uniformly, is
            # evaluated on the host when the timing ends (seconds of CPU work, out of the timed blocks)
            big = [item for item in sample.pending.taken if item[1].numel() >= POOL_BELOW]
            for path, *_ in (item for item in sample.pending.taken if item[1].numel() < POOL_BELOW):
                judge.skipped[f"{path} (timed call)"] = f"fewer than {POOL_BELOW} elements: one timed call is too few to pool"
            if big:
                judge.host_seen += 1
                if judge.random(bench).random() < 1 / judge.host_seen:
                    sample.pending.taken = big
                    judge.host_pending = (sample.source, sample.pending, first + i + 1)
        return None if why is None else _timed_failure(first + i + 1, why)
    eager = clone_tree(eager)  # a view into the reference worker's arena, which its next request reuses
    header, payload = bench.reference.checked({"op": "wide", "slot": slot, "seed": seed,
                                               "arena_cap": bench.arena_cap(1, outputs_only=True) + 2 * bench.problem.output_bytes},
                                              bench.options.trial_timeout)
    if header.get("float64_skipped"):
        judge.skipped[KEY] = str(header["float64_skipped"])
        return None
    wide = bench.reference.outputs(header, payload)[0]
    judge.timed_samples += 1
    why = judge.observe(KEY, wide, eager, cand)
    del wide, eager
    return None if why is None else _timed_failure(first + i + 1, why)


def _timed_failure(call: int, why: str) -> Failure:
    return Failure(Verdict.INCORRECT, "timing:float64-bound", f"timed call {call}: {why}",
                   f"Correct in every trial, but timed call {call} was not: {why}. A kernel must compute "
                   "the same way on every call.")


def timed_final(bench: "Bench", evaluation: "Evaluation") -> Failure | None:
    """The sampled timed call evaluated on the host (tools/judge/exact_host.py: seconds of CPU work,
    kept out of the timed blocks), the pooled small outputs of the sampled timed calls; the record's
    float64 fields brought up to date."""
    judge, errors = evaluation.exact, evaluation.result.errors
    if judge is None or not judge.timed_samples:
        return None
    if judge.host_pending is not None:
        source, took, call = judge.host_pending
        judge.host_pending = None
        with evaluation.phase("float64_timed"):
            if (why := judge_host(bench, judge, KEY, source, took, where="timed call")) is not None:
                return _timed_failure(call, why)
    why = judge.final()
    errors.float64 = f"{errors.float64 or 'judged'}; {judge.timed_samples} timed calls judged"
    errors.float64_norm_ratio = round(judge.worst_norm, 4) if judge.worst_norm < float("inf") else None
    errors.float64_max_ratio = round(judge.worst_max, 4) if judge.worst_max < float("inf") else None
    if why is None:
        return None
    return Failure(Verdict.INCORRECT, "timing:float64-bound", why.replace("over the trials", "over the timed calls judged"),
                   f"Correct in every trial, but not on the timed calls: {why.replace('over the trials', 'over the timed calls judged')}.")

