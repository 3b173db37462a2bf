"""The correctness trials of one candidate, and the run-time integrity checks after them.

Each trial: the reference's outputs on the trial's inputs (cached per seed and distribution), the
same inputs written into the candidate's worker, one forward there with uninitialized memory
poisoned, then, in the parent: no output aliasing an input, outputs equal to the reference's
within tolerance, inputs unchanged unless the reference changes them. The distributions rotate
over the trials (tools/judge/distributions.py). After the trials and the held-out ones
(tools/judge/heldout.py), `integrity`: the candidate's own kernels ran in every forward (held-out
ones included), and in a single-op problem nothing computing was left to torch.
"""
from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

from tools.guard.ops import compute_ops
from tools.judge.compare import Stats
from tools.judge.distributions import words
from tools.judge.exact import STRESS
from tools.judge.exact_rows import RowSample
from tools.judge.trial_checks import compare_reply
from tools.judge.verdict import Failure, passed, reply_failure
from tools.record import Errors, Verdict

if TYPE_CHECKING:
    from tools.judge.bench import Bench
    from tools.judge.exact import ExactJudge
    from tools.judge.evaluation import Evaluation


def trials(bench: "Bench", evaluation: "Evaluation") -> Failure | None:
    """Step: the correctness trials, one per seed."""
    with evaluation.phase("correctness"):
        return _trials(bench, evaluation)


def _trials(bench: "Bench", evaluation: "Evaluation") -> Failure | None:
    assert evaluation.worker is not None, "the worker step runs first"
    worker, result = evaluation.worker, evaluation.result
    stats = Stats()
    for i, seed in enumerate(bench.seeds):
        dist = bench.distribution(i, seed)
        name = f"trial-{i}:{dist}"
        with bench.trial_lock(dist):  # the reference's outputs may be read in place (a set too large to copy)
            # the inputs first: feeding them goes through the reference worker's arena, where a
            # borrowed set of its outputs lies until its next request
            trees, payload = bench.feed(worker, [(None, seed, dist)])
            ref_out, ref_in = bench.reference_outputs(seed, dist, borrow=True)
            exact = exact_for_set(bench, evaluation, seed, dist, STRESS if dist.startswith(STRESS) else "trials", trial=i)
            header, payload = worker.request({"op": "trial", "inputs": trees[0], "poison": True,
                                              "arena_cap": bench.arena_cap(2)}, bench.options.trial_timeout, payload)
            if i == 0:
                result.phases["first_trial"] = round(float(header.get("seconds") or 0.0), 4)  # incl. JIT
            if (failure := reply_failure(header, name)) is not None:
                return failure
            compared = compare_reply(worker, header, payload, ref_out, ref_in, stats, bench.options.tolerances, name,
                                     fed=trees[0], exact=exact)
            del ref_out, ref_in, exact
        evaluation.saw_launches(int(header.get("launches") or 0))
        result.kernel_launches = evaluation.launched or 0
        if isinstance(header.get("ops"), dict):
            evaluation.torch_ops.update(compute_ops(header["ops"]))
            result.torch_ops = sorted(evaluation.torch_ops)
        if compared.failure is not None:  # malformed outputs: the worker's doing
            return compared.failure
        result.errors = Errors(max_abs=stats.max_abs, max_rel=stats.max_rel, norm_rel=stats.norm_rel)
        if compared.problem:
            result.dropped = dict(bench.distributions.dropped)
            check, verdict, message = compared.problem
            return Failure(verdict, f"{name}:{check}", message,
                           f"Trial {i + 1} of {len(bench.seeds)} ({words(dist)}): {message}")
        passed(result, name)
        result.trials = i + 1
        result.distributions.append(dist)
    result.dropped = dict(bench.distributions.dropped)
    return None


def exact_for_set(bench: "Bench", evaluation: "Evaluation", seed: int, dist: str, key: str,
                  trial: int | None = None) -> "tuple[ExactJudge, str, Any] | None":
    """(judge, pool key, the reference's float64 outputs or a RowSample where they do not fit) for
    compare_reply(), or None (not a float32 problem, the bound off, or no float64 outputs for this
    set: recorded why). `trial`: the main trial's index (a main trial's set is evaluated on the host
    where its rows do not judge an output: tools/judge/exact_host.py; a held-out one's is not)."""
    judge = evaluation.exact_for(bench)
    if judge is None:
        return None
    if bench.exact_sampled:  # rows drawn once the candidate has answered (compare_reply)
        return judge, key, RowSample(bench, {"seed": seed, "distribution": dist}, host=trial is not None)
    wide, why = bench.reference_wide(seed, dist)
    if wide is None:
        judge.skipped[dist] = why or "no float64 outputs"
        return None
    return judge, key, wide


def float64_bound(bench: "Bench", evaluation: "Evaluation") -> Failure | None:
    """The pooled part of the float64-judged bound (outputs too small to judge one trial at a time:
    tools/judge/exact.py), after the trials and the held-out ones; the record's float64 errors."""
    judge, result = evaluation.exact, evaluation.result
    if judge is None:
        result.errors.float64 = f"not judged: {bench.exact_refused or 'no output was compared'}"
        return None
    why = judge.final()
    result.errors.float64_norm_ratio = round(judge.worst_norm, 4) if math.isfinite(judge.worst_norm) else None
    result.errors.float64_max_ratio = round(judge.worst_max, 4) if math.isfinite(judge.worst_max) else None
    skipped = "; ".join(f"{k}: {v}" for k, v in sorted(judge.skipped.items()))
    host = f", {judge.host_sets} outputs on sets evaluated on the host" if judge.host_sets else ""
    host += f"; not on the host: {bench.host_refused}" if bench.host_refused and judge.skipped else ""
    rows = f", on {judge.sampled_rows} sampled rows{host}: {bench.exact_refused}" if bench.exact_sampled else ""
    result.errors.float64 = f"judged ({judge.judged} trial outputs{rows})" + (f"; not judged: {skipped}" if skipped else "")
    if why is not None:
        if bench.exact_sampled:
            why += f" (on {judge.sampled_rows} rows of the batch sampled after the candidate answered)"
        return Failure(Verdict.INCORRECT, "float64-bound", why,
                       f"Every trial was within the float32 tolerance, but {why}.")
    passed(result, "float64-bound", result.errors.float64)
    return None


def integrity(bench: "Bench", evaluation: "Evaluation") -> Failure | None:
    """Step: the candidate's own kernels ran in every forward; a single-op problem's op was not left to torch."""
    with evaluation.phase("correctness"):
        if (failure := float64_bound(bench, evaluation)) is not None:
            return failure
        result = evaluation.result
        if not evaluation.launched:
            defines_kernel = evaluation.scan is not None and bool(evaluation.scan.triton_kernels or evaluation.scan.uses_load_inline)
            return Failure(
                Verdict.REJECTED, "kernel-launched", "a forward() with no launch of the candidate's own kernels",
                "Rejected: the candidate defines a kernel but did not launch it in every forward() call; the work must "
                "run in your own kernel." if defines_kernel else
                "Rejected: the candidate defines no kernel of its own (no @triton.jit function, no load_inline), so no "
                "forward() launched one; the work must run in your own kernel (the guard rule own-kernel, which says so "
                "first, was switched off).")
        passed(result, "kernel-launched", f"{evaluation.launched} launches in one forward")
        if bench.problem.single_op and result.torch_ops:
            ops = ", ".join(result.torch_ops)
            return Failure(Verdict.REJECTED, "single-op", ops,
                           f"Rejected (rule single-op): this problem is the single op {bench.problem.single_op}, and "
                           f"forward() left {ops} to torch; compute it in your kernel.")
        return None
