"""The steps from a source to a built ModelNew in the candidate's worker.

- `cuda_build`: a load_inline source's extensions, built in a sandbox of their own without a GPU
  (tools/processes/builds.py), or found built; with the Triton kernels an earlier evaluation of
  the same source compiled, they are the files installed in the worker before its build;
- `worker`: the candidate's worker, started ahead of need, ready and confined;
- `build`: the files installed, then the candidate's module loaded and ModelNew built with the
  reference's constructor arguments.
"""
from __future__ import annotations

import time
from typing import TYPE_CHECKING

from tools.judge.verdict import FAULT_ADVICE, Failure, passed, reply_failure
from tools.processes import builds
from tools.processes.allowance import Allowance
from tools.processes.process import WorkerGone
from tools.record import Verdict

if TYPE_CHECKING:
    from tools.judge.bench import Bench
    from tools.judge.evaluation import Evaluation


def cuda_build(bench: "Bench", evaluation: "Evaluation") -> Failure | None:
    """Step: the build products to install (CUDA C++ extensions built now if need be)."""
    assert evaluation.scan is not None, "the static step runs first"
    parts = [found] if (found := bench.builds.triton(evaluation.source)) else []
    if evaluation.scan.uses_load_inline:
        built = bench.builds.cuda(evaluation.source)
        if built.waited_s is not None:
            evaluation.result.phases["cuda_build"] = round(built.waited_s, 4)  # what this evaluation waited for the build
        if built.whole_s is not None:
            evaluation.result.phases["prebuild"] = round(built.whole_s, 4)  # the build worker's whole run
        if built.lost is not None:
            return Failure(Verdict(built.lost.verdict), "build", f"the build step: {built.lost}")
        if (failure := reply_failure(built.reply, "build")) is not None:
            return failure
        if built.unusable is not None:
            return Failure(Verdict.REJECTED, "build", f"the build step handed over unusable files: {built.unusable}")
        assert built.files is not None
        if built.built:
            passed(evaluation.result, "cuda-build", f"{built.built} extension(s) built in the build sandbox")
        parts.append(built.files)
    evaluation.files = builds.merge(parts)
    return None


START_TRIES = 3  # workers taken before a failure to start is the evaluator's verdict


def worker(bench: "Bench", evaluation: "Evaluation") -> Failure | None:
    """Step: the candidate's worker, ready (started ahead of need: what this evaluation waited for).
    A worker that dies or fails before it is handed the candidate (starting, or ready and waiting)
    has run nothing of the candidate's: it is the evaluator's loss (a zygote killed under it, a holder gone), never the candidate's
    `crashed`. Another is taken; after START_TRIES, the verdict is an evaluator fault (`error`)."""
    t0 = time.monotonic()
    lost: list[str] = []
    for _ in range(START_TRIES):
        evaluation.worker = proc = bench.take_worker()
        try:
            ready = proc.wait_ready(bench.options.start_timeout)
            if ready.get("op") == "ready":
                bench.builds.publish_tools_layer(proc)  # asked before it is handed any candidate
                if proc.alive():  # a spare that was ready may have died since, candidate-less
                    break
                ready = {"op": "gone", "message": f"the ready worker died (exit status {proc.proc.poll()})"}
        except WorkerGone as exc:
            ready = {"op": "gone", "message": str(exc)}
        lost.append(str(ready.get("message")))
        proc.kill()
    else:
        return Failure(Verdict.ERROR, "evaluator:worker-start", f"{START_TRIES} candidate workers did not start: "
                       f"{'; '.join(lost)}", f"ratchet's evaluator failed (no candidate worker started: {lost[-1]}); "
                       f"{FAULT_ADVICE}")
    if lost:
        evaluation.result.phases["start_retries"] = len(lost)  # a diagnostic: spares lost before the candidate
    evaluation.result.environment["sandbox"]["applied"] = ready.get("confined", [])
    evaluation.result.phases["start"] = round(time.monotonic() - t0, 4)
    evaluation.result.phases.update(proc.boot_phases(ready))
    return None


def build(bench: "Bench", evaluation: "Evaluation") -> Failure | None:
    """Step: install the build products, then load the source and build ModelNew."""
    assert evaluation.worker is not None, "the worker step runs first"
    timeout = bench.options.build_timeout
    # from here on the worker runs the candidate's code: the evaluation's deadline counts
    evaluation.worker.allowance = Allowance(bench.deadline_s)
    with evaluation.phase("build"):
        if evaluation.files[0]:
            installed = evaluation.worker.request({"op": "install", "files": evaluation.files[0]}, timeout, evaluation.files[1])[0]
            if (failure := reply_failure(installed, "build")) is not None:
                return failure
        init_tree, init_payload = bench.reference.init
        built = evaluation.worker.request({"op": "build", "source": evaluation.source, "init": init_tree}, timeout, init_payload)[0]
    cuda = built.get("cuda") or {}
    if cuda.get("cached"):
        evaluation.result.phases["cuda_load"] = round(cuda["seconds"], 4)  # inside "build"; built earlier (tools/processes/builds.py)
    if (failure := reply_failure(built, "build")) is not None:
        return failure
    passed(evaluation.result, "build")
    return None
