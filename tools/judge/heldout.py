"""The drop-in check: one untimed trial per held-out variant of the problem (other sizes and
constructor arguments, derived or declared by the problem: tools/worker/variants.py), after the
correctness trials, in the same candidate worker. A variant of other sizes only (the constructor's
arguments unchanged) runs through the very instance that ran the trials, so that what it planned
on its first call meets the new shapes; one with other constructor arguments, through a new one.

A kernel must compute the module's function for what a user varies, not only for the benchmark's
shapes. On a variant, the candidate's ModelNew is built again with the variant's constructor
arguments (same initialization seed as the reference's), runs once on inputs the reference
worker made at the variant's sizes, and is compared with the reference like any trial. Outcomes,
recorded per variant in `Result.heldout`, and in `Result.generalizes`:

- right on every variant: generalizes True;
- right, but leaving to torch on a variant a computation its own kernels did on the problem's
  sizes (an exact-shape kernel with a torch fallback): generalizes False, an entry `fallback` in
  `heldout`, the verdict unaffected;
- a candidate that declares itself specialized (a line `# ratchet: specialized` in its file) and
  raises an error on a variant (refuses it): generalizes False, the verdict is unaffected, and
  `ratchet best` says so;
- anything else (a wrong result, an error from an undeclared kernel, a wrong result from a
  declared one): the candidate fails, naming the variant's sizes and the inputs' shapes;
- no variant (the problem declares its shapes fixed, or none the reference accepts):
  generalizes None, and `heldout` says why.
"""
from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

from tools.guard.ops import compute_ops
from tools.judge.compare import Stats
from tools.judge.trial_checks import compare_reply
from tools.judge.trials import exact_for_set
from tools.judge.verdict import Failure, passed, reply_failure
from tools.processes.process import WorkerGone
from tools.record import Result, Verdict

if TYPE_CHECKING:
    from tools.judge.bench import Bench
    from tools.judge.evaluation import Evaluation

SPECIALIZED = re.compile(r"^\s*#\s*ratchet:\s*specialized\b", re.MULTILINE)
HOW = ("A kernel must compute the module's function for every size and constructor argument a user "
       "passes (batch and other leading dimensions, sequence lengths, scalar arguments): take sizes from "
       "the inputs and arguments from __init__, mask the tails. A kernel specialized on purpose says "
       "`# ratchet: specialized` in its file and raises an error for other shapes.")


def declares_specialized(source: str) -> bool:
    return bool(SPECIALIZED.search(source))


def heldout(bench: "Bench", evaluation: "Evaluation") -> Failure | None:
    """Step: one untimed trial per held-out variant, in the candidate's worker."""
    with evaluation.phase("correctness"):
        return _heldout(bench, evaluation)


def _heldout(bench: "Bench", evaluation: "Evaluation") -> Failure | None:
    assert evaluation.worker is not None, "the worker step runs first"
    result = evaluation.result
    specialized = declares_specialized(evaluation.source)
    result.heldout = [{"variant": d["variant"], "outcome": "not used", "detail": d["why"]}
                      for d in bench.problem.variants_dropped]
    launches: list[int] = []  # own-kernel launches of each variant that ran
    ops: list[dict[str, int]] = []  # torch ops of each variant that ran
    refused = False
    for k, variant in enumerate(bench.problem.variants):
        name, desc = f"heldout-{k}", variant["describe"]
        try:
            step = _one(bench, evaluation, k, name, desc, specialized, launches, ops)
        except WorkerGone as exc:
            raise WorkerGone(exc.verdict, f"on held-out sizes ({desc}): {exc}") from None
        if isinstance(step, Failure):
            return step
        refused = refused or step == "refused"
    # a forward that leaves to torch on other sizes what it computed itself on the problem's
    # (an exact-shape kernel with a torch fallback) is right there, but not the candidate's work
    fell_back = sorted(set().union(*(compute_ops(found) for found in ops)) - evaluation.torch_ops) if ops else []
    if fell_back:
        note = f"left {', '.join(fell_back)} to torch on held-out sizes that its own kernels computed on the problem's"
        result.heldout.append({"variant": "any", "outcome": "fallback", "detail": note})
    if bench.problem.variants:
        result.generalizes = not refused and not fell_back
    evaluation.launched = min([evaluation.launched or 0, *launches])
    for found in ops:
        evaluation.torch_ops.update(compute_ops(found))
    result.torch_ops = sorted(evaluation.torch_ops)
    result.kernel_launches = evaluation.launched
    return None


def _one(bench: "Bench", evaluation: "Evaluation", k: int, name: str, desc: str, specialized: bool,
         launches: list[int], ops: list[dict[str, int]]) -> str | Failure:
    """One variant: "ok", "refused" (declared specialized, it raised), or the failure."""
    assert evaluation.worker is not None
    worker, result, options = evaluation.worker, evaluation.result, bench.options
    dist = f"variant:{k}"
    seed = bench.seeds[k % len(bench.seeds)]
    with bench.lock:
        init_tree, init_payload = bench.reference.variant_init(k, options.build_timeout)
    # sizes only (the constructor's arguments unchanged): through the instance that ran the
    # trials, so that what it planned on its first call (a grid, a tile, a buffer) meets new shapes
    same_instance = (init_tree, init_payload) == bench.reference.init
    if not same_instance:
        built = worker.request({"op": "variant", "init": init_tree}, options.build_timeout, init_payload)[0]
        if built.get("op") == "error" and not built.get("violations"):
            with bench.lock:  # the sizes' inputs, for the message: the reference's, read in place
                where = f"held-out sizes ({desc}; inputs {_shapes(bench.reference_outputs(seed, dist, borrow=True)[1])})"
            return _raised(result, name, desc, where, built, specialized)
        if (failure := reply_failure(built, name)) is not None:
            return failure
    with bench.trial_lock(dist):  # as in tools/judge/trials.py: the inputs first, then the reference's outputs, read in place
        trees, payload = bench.feed(worker, [(None, seed, dist)])
        ref_out, ref_in = bench.reference_outputs(seed, dist, borrow=True)
        exact = exact_for_set(bench, evaluation, seed, dist, "trials")  # small outputs pooled with the trials'
        shapes = _shapes(ref_in)
        where = f"held-out sizes ({desc}; inputs {shapes})"
        header, payload = worker.request({"op": "trial", "inputs": trees[0], "poison": True,
                                          "model": "main" if same_instance else "variant",
                                          "arena_cap": bench.arena_cap(2, dist=dist)}, options.trial_timeout, payload)
        if header.get("op") == "error" and not header.get("violations"):
            return _raised(result, name, desc, where, header, specialized)
        if (failure := reply_failure(header, name)) is not None:
            return failure
        # a Stats of its own: the result's error sizes stay those of the correctness trials
        compared = compare_reply(worker, header, payload, ref_out, ref_in, Stats(), options.tolerances, name,
                                 fed=trees[0], exact=exact)
        del ref_out, ref_in, exact
    if compared.failure is not None:  # the record still lists the variant as failed
        result.heldout.append({"variant": desc, "outcome": "failed", "detail": "malformed output from the worker"})
        return compared.failure
    if compared.problem:
        check, verdict, message = compared.problem
        declared = (" It declares `# ratchet: specialized`, but returned a wrong result instead of refusing these "
                    "inputs with an error." if specialized else "")
        result.heldout.append({"variant": desc, "outcome": "failed", "detail": message})
        return Failure(verdict, f"{name}:{check}", f"{where}: {message}",
                       f"Correct on the problem's own sizes, but not on {where}: {message}{declared} {HOW}")
    launches.append(int(header.get("launches") or 0))
    if isinstance(header.get("ops"), dict):
        ops.append(header["ops"])
    result.heldout.append({"variant": desc, "outcome": "ok", "detail": f"inputs {shapes}"})
    passed(result, name, desc)
    return "ok"


def _raised(result: Result, name: str, desc: str, where: str, reply: dict[str, Any], specialized: bool) -> str | Failure:
    """The candidate raised on a variant (or its kernel did not compile for it): a refusal if it
    declares itself specialized, else a failure with the worker's kind of failure, naming the sizes."""
    message = str(reply.get("message") or "an error").strip()
    first = message.splitlines()[-1].strip() if message else "an error"  # the exception, after its frames
    kind = reply.get("kind")
    verdict = Verdict.COMPILE_ERROR if kind == "compile_error" else Verdict.CRASHED if kind == "crashed" else Verdict.RUNTIME_ERROR
    if specialized and verdict is not Verdict.CRASHED:  # an error raised (or a kernel that does not compile) refuses
        result.heldout.append({"variant": desc, "outcome": "refused", "detail": first})
        passed(result, name, f"refused {where} (declared specialized): {first}")
        return "refused"
    result.heldout.append({"variant": desc, "outcome": "failed", "detail": first})
    return Failure(verdict, name, f"{where}: {message}",
                   f"Correct on the problem's own sizes, but it failed on {where}: {first}. {HOW}")


def _shapes(tree: Any) -> str:
    import torch

    items = tree if isinstance(tree, (list, tuple)) else [tree]
    return ", ".join(str(tuple(x.shape)) if isinstance(x, torch.Tensor) else repr(x) for x in items) or "none"
