"""The correctness trials of one candidate and the run-time integrity checks after them.

Each trial: the reference's outputs on the trial's inputs (cached per seed and distribution), the
same inputs written into the candidate's worker, one forward there with uninitialized memory
poisoned, then, in the parent: no output aliasing an input, outputs equal to the reference's
within tolerance, inputs unchanged unless the reference changes them. Distributions alternate
between the problem's own and a shifted one (dropped for a problem whose reference stops being
finite under it). After the trials: the candidate's own kernels ran in every forward, and in a
single-op problem nothing computing was left to torch.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from tools.compare import Stats
from tools.feed import feed
from tools.ops import compute_ops
from tools.process import WorkerProcess
from tools.record import Errors, Result, Verdict
from tools.transport import TransportError
from tools.trial_checks import aliasing, mismatch, nonfinite
from tools.verdict import accept, fail, passed

if TYPE_CHECKING:
    from tools.evaluate import Evaluator


def run(ev: "Evaluator", worker: WorkerProcess, result: Result) -> None:
    stats = Stats()
    launched: int | None = None  # the fewest own-kernel launches in any trial: each must launch
    torch_ops: set[str] = set()  # compute ops left to torch in any trial (every trial is recorded)
    for i, seed in enumerate(ev.seeds):
        dist = distribution(ev, i, seed)
        ref_out, ref_in = ev.reference_outputs(seed, dist)
        trees, payload = feed(ev, worker, [(None, seed, dist)])
        header, payload = worker.request({"op": "trial", "inputs": trees[0], "poison": True, "arena_cap": ev.arena_cap(2)},
                                         ev.options.trial_timeout, payload)
        name = f"trial-{i}:{dist}"
        if i == 0:
            result.phases["first_trial"] = round(float(header.get("seconds") or 0.0), 4)  # incl. JIT
        if not ev.verdict_from_reply(header, name, result):
            return
        count = int(header.get("launches") or 0)
        launched = count if launched is None else min(launched, count)
        result.kernel_launches = launched
        if isinstance(header.get("ops"), dict):
            torch_ops.update(compute_ops(header["ops"]))
            result.torch_ops = sorted(torch_ops)
        try:
            cand_out, cand_in = worker.outputs(header, payload)
        except (TransportError, KeyError, TypeError, ValueError) as exc:
            fail(result, Verdict.REJECTED, name, f"malformed output: {exc}", f"The worker sent malformed outputs ({exc}).")
            return
        problem = (aliasing(header["tree"]) or mismatch(ref_out, cand_out, stats, ev.options.tolerances, "output")
                   or mismatch(ref_in, cand_in, Stats(), ev.options.tolerances, "input", what="inputs after forward"))
        del cand_out, cand_in  # the worker frees its side at its next request
        result.errors = Errors(max_abs=stats.max_abs, max_rel=stats.max_rel, norm_rel=stats.norm_rel)
        if problem:
            check, verdict, message = problem
            fail(result, verdict, f"{name}:{check}", message, f"Trial {i + 1} of {len(ev.seeds)} ({dist} inputs): {message}")
            return
        passed(result, name)
        result.trials = i + 1
    integrity(ev, result, launched or 0)


def integrity(ev: "Evaluator", result: Result, launched: int) -> None:
    if launched == 0:
        fail(result, Verdict.REJECTED, "kernel-launched", "a forward() with no launch of the candidate's own kernels",
             "Rejected: the candidate defines a kernel but did not launch it in every forward() call; the work must run in your own kernel.")
        return
    passed(result, "kernel-launched", f"{launched} launches in one forward")
    if ev.problem.single_op and result.torch_ops:
        ops = ", ".join(result.torch_ops)
        fail(result, Verdict.REJECTED, "single-op", ops,
             f"Rejected (rule single-op): this problem is the single op {ev.problem.single_op}, and forward() left {ops} to torch; compute it in your kernel.")
        return
    accept(result, f"Correct on {result.trials} trials (max abs error {result.errors.max_abs:.3g}, "
                   f"relative norm error {result.errors.norm_rel:.3g}).")


def distribution(ev: "Evaluator", i: int, seed: int) -> str:
    with ev._lock:
        dist = ev.distributions[i % len(ev.distributions)]
        if dist == "shifted":
            out, _ = ev.reference_outputs(seed, "shifted")
            base, _ = ev.reference_outputs(seed, "problem")
            if nonfinite(out) and not nonfinite(base):
                ev.distributions = ["problem"]  # the problem does not allow it
                return "problem"
        return dist
