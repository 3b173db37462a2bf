"""The correctness trials of one candidate and the run-time integrity checks after them.

Each trial: the reference's outputs on the trial's inputs (cached per seed and distribution), the
same inputs written into the candidate's worker, one forward there with uninitialized memory
poisoned, then, in the parent: no output aliasing an input, outputs equal to the reference's
within tolerance, inputs unchanged unless the reference changes them. After the trials: one
trial per held-out variant (other sizes and constructor arguments, tools/judge/heldout.py); then the
candidate's own kernels ran in every forward (held-out ones included), and in a single-op
problem nothing computing was left to torch.

Distributions (tools/worker/inputs.py) rotate over the trials: the problem's own, a shifted one
(wider, off-centre), and a signed one (centred on zero: both signs of every continuous input).
A distribution under which the reference's output stops being finite where it was finite on the
problem's own inputs is not what the problem allows: "shifted" is then dropped; "signed" keeps
the inputs that can cross zero (each tried alone, then together) and leaves the others as the
problem made them, or is dropped when none can. What was dropped, and why, is in the record
(`Result.dropped`); the distribution of every trial too (`Result.distributions`).
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from tools.judge import heldout
from tools.judge.compare import Stats
from tools.processes.feed import feed
from tools.guard.ops import compute_ops
from tools.problem import ProblemError
from tools.processes.process import WorkerProcess
from tools.record import Errors, Result, Verdict
from tools.judge.trial_checks import compare_reply, nonfinite
from tools.judge.verdict import accept, fail, passed

if TYPE_CHECKING:
    from tools.evaluate import Evaluator


def run(ev: "Evaluator", worker: WorkerProcess, result: Result, source: str, defines_kernel: bool = True) -> None:
    stats = Stats()
    launched: int | None = None  # the fewest own-kernel launches in any trial: each must launch
    torch_ops: set[str] = set()  # compute ops left to torch in any trial (every trial is recorded)
    for i, seed in enumerate(ev.seeds):
        dist = distribution(ev, i, seed)
        name = f"trial-{i}:{dist}"
        with ev.trial_lock(dist):  # the reference's outputs may be read in place (a set too large to copy)
            # the inputs first: feeding them goes through the reference worker's arena, where a
            # borrowed set of its outputs lies until its next request
            trees, payload = feed(ev, worker, [(None, seed, dist)])
            ref_out, ref_in = ev.reference_outputs(seed, dist, borrow=True)
            header, payload = worker.request({"op": "trial", "inputs": trees[0], "poison": True, "arena_cap": ev.arena_cap(2)},
                                             ev.options.trial_timeout, payload)
            if i == 0:
                result.phases["first_trial"] = round(float(header.get("seconds") or 0.0), 4)  # incl. JIT
            if not ev.verdict_from_reply(header, name, result):
                return
            compared = compare_reply(worker, header, payload, ref_out, ref_in, stats, ev.options.tolerances, result, name,
                                     fed=trees[0])
            del ref_out, ref_in
        count = int(header.get("launches") or 0)
        launched = count if launched is None else min(launched, count)
        result.kernel_launches = launched
        if isinstance(header.get("ops"), dict):
            torch_ops.update(compute_ops(header["ops"]))
            result.torch_ops = sorted(torch_ops)
        if not compared.readable:
            return
        result.errors = Errors(max_abs=stats.max_abs, max_rel=stats.max_rel, norm_rel=stats.norm_rel)
        if compared.problem:
            result.dropped = dict(ev.dropped)
            check, verdict, message = compared.problem
            fail(result, verdict, f"{name}:{check}", message, f"Trial {i + 1} of {len(ev.seeds)} ({words(dist)}): {message}")
            return
        passed(result, name)
        result.trials = i + 1
        result.distributions.append(dist)
    result.dropped = dict(ev.dropped)
    extra = heldout.run(ev, worker, result, source)  # the drop-in check: other sizes, other arguments
    if extra is None:
        return
    launched = min([launched or 0, *extra.launches])
    for ops in extra.ops:
        torch_ops.update(compute_ops(ops))
    result.torch_ops = sorted(torch_ops)
    result.kernel_launches = launched
    integrity(ev, result, launched, defines_kernel)


def integrity(ev: "Evaluator", result: Result, launched: int, defines_kernel: bool = True) -> None:
    if launched == 0:
        fail(result, Verdict.REJECTED, "kernel-launched", "a forward() with no launch of the candidate's own kernels",
             "Rejected: the candidate defines a kernel but did not launch it in every forward() call; the work must run in your own kernel."
             if defines_kernel else
             "Rejected: the candidate defines no kernel of its own (no @triton.jit function, no load_inline), so no forward() "
             "launched one; the work must run in your own kernel (the guard rule own-kernel, which says so first, was switched off).")
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
    """The distribution of trial i: the rotation's next one still allowed for this problem."""
    with ev._lock:
        while True:
            dist = ev.distributions[i % len(ev.distributions)]
            if dist == "shifted" and _breaks(ev, seed, "shifted"):
                _drop(ev, "shifted", "the reference's output is not finite (or it raises) on shifted inputs")
            elif dist == "signed":
                _choose_signed(ev, seed)  # replaced by the inputs that may cross zero, or dropped
            else:
                return dist


def words(dist: str) -> str:
    """A trial's distribution as the model and the user read it in a failure message."""
    kind, _, leaves = dist.partition(":")
    if kind == "signed":
        return f"signed inputs: input {_names([int(n) for n in leaves.split(',')])} drawn around zero, both signs"
    return {"problem": "problem inputs", "shifted": "shifted inputs: wider and off-centre"}.get(kind, f"{dist} inputs")


def _breaks(ev: "Evaluator", seed: int, dist: str) -> bool:
    """The reference stops being finite under `dist` (or refuses its inputs: binary_cross_entropy
    of values outside [0, 1]) where it is finite on the problem's own inputs. Called under the
    evaluator's lock (distribution()), which keeps outputs read in place valid while they are read."""
    try:
        out, _ = ev.reference_outputs(seed, dist, borrow=True)
    except ProblemError:  # the reference raised on these inputs; on its own ones it must not
        ev.reference_outputs(seed, "problem", borrow=True)
        return True
    if not nonfinite(out):
        return False
    del out
    base, _ = ev.reference_outputs(seed, "problem", borrow=True)
    return not nonfinite(base)


def _choose_signed(ev: "Evaluator", seed: int) -> None:
    """Replace "signed" in the rotation by the inputs that may cross zero: all, some, or none."""
    at = ev.distributions.index("signed")
    leaves = floating_leaves(ev.problem.inputs)
    if not leaves:
        _drop(ev, "signed", "the problem has no floating inputs")
        return
    keep = leaves if not _breaks(ev, seed, _signed(leaves)) else [n for n in leaves if not _breaks(ev, seed, _signed([n]))]
    if len(keep) > 1 and keep != leaves and _breaks(ev, seed, _signed(keep)):
        keep = keep[:1]  # each may cross zero alone, not together: the first
    lost = [n for n in leaves if n not in keep]
    if not keep:
        _drop(ev, "signed", f"the reference's output is not finite (or it raises) when input {_names(lost)} cross zero")
        return
    ev.distributions[at] = _signed(keep)
    if lost:
        ev.dropped["signed"] = (f"input {_names(lost)} keep the problem's own signs: the reference's output is not "
                                f"finite (or it raises) when they cross zero")


def _signed(leaves: list[int]) -> str:
    return "signed:" + ",".join(map(str, leaves))


def _drop(ev: "Evaluator", dist: str, why: str) -> None:
    ev.distributions.remove(dist)
    ev.dropped[dist] = why


def _names(leaves: list[int]) -> str:
    return ", ".join(f"#{n}" for n in leaves)


def floating_leaves(described: list[dict]) -> list[int]:
    """The numbers of the floating tensor leaves, depth-first, in get_inputs()'s description
    (tools/worker/inputs.py describe(); the numbering of "signed:N")."""
    found: list[int] = []
    count = 0

    def walk(items: list[dict]) -> None:
        nonlocal count
        for d in items:
            if d.get("kind") == "tensor":
                if d.get("dtype", "").startswith(("float", "bfloat")):
                    found.append(count)
                count += 1
            elif d.get("kind") in ("list", "tuple"):
                walk(d.get("items", []))

    walk(described)
    return found
