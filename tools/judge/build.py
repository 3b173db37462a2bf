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

from tools.judge.verdict import Failure, passed, reply_failure
from tools.processes import builds
from tools.processes.process import WorkerGone
from tools.record import Verdict

if TYPE_CHECKING:
    from tools.judge.bench import Bench
    from tools.judge.evaluation import Evaluation


def cuda_build(bench: "Bench", ev: "Evaluation") -> Failure | None:
    """Step: the build products to install (CUDA C++ extensions built now if need be)."""
    assert ev.scan is not None, "the static step runs first"
    parts = [found] if (found := bench.builds.triton(ev.source)) else []
    if ev.scan.uses_load_inline:
        built = bench.builds.cuda(ev.source)
        if built.waited_s is not None:
            ev.result.phases["cuda_build"] = round(built.waited_s, 4)  # what this evaluation waited for the build
        if built.whole_s is not None:
            ev.result.phases["prebuild"] = round(built.whole_s, 4)  # the build worker's whole run
        if built.lost is not None:
            return Failure(Verdict(built.lost.verdict), "build", f"the build step: {built.lost}")
        if (failure := reply_failure(built.reply, "build")) is not None:
            return failure
        if built.unusable is not None:
            return Failure(Verdict.REJECTED, "build", f"the build step handed over unusable files: {built.unusable}")
        assert built.files is not None
        if built.built:
            passed(ev.result, "cuda-build", f"{built.built} extension(s) built in the build sandbox")
        parts.append(built.files)
    ev.files = builds.merge(parts)
    return None


def worker(bench: "Bench", ev: "Evaluation") -> Failure | None:
    """Step: the candidate's worker, ready (started ahead of need: what this evaluation waited for)."""
    ev.worker = proc = bench.take_worker()
    t0 = time.monotonic()
    ready = proc.wait_ready(bench.options.start_timeout)
    if ready.get("op") != "ready":
        raise WorkerGone("crashed", f"the candidate worker did not start: {ready.get('message')}")
    ev.result.environment["sandbox"]["applied"] = ready.get("confined", [])
    ev.result.phases["start"] = round(time.monotonic() - t0, 4)
    ev.result.phases.update(proc.boot_phases(ready))
    bench.builds.publish_tools_layer(proc)
    return None


def build(bench: "Bench", ev: "Evaluation") -> Failure | None:
    """Step: install the build products, then load the source and build ModelNew."""
    assert ev.worker is not None, "the worker step runs first"
    timeout = bench.options.build_timeout
    with ev.phase("build"):
        if ev.files[0]:
            installed = ev.worker.request({"op": "install", "files": ev.files[0]}, timeout, ev.files[1])[0]
            if (failure := reply_failure(installed, "build")) is not None:
                return failure
        init_tree, init_payload = bench.reference.init
        built = ev.worker.request({"op": "build", "source": ev.source, "init": init_tree}, timeout, init_payload)[0]
    cuda = built.get("cuda") or {}
    if cuda.get("cached"):
        ev.result.phases["cuda_load"] = round(cuda["seconds"], 4)  # inside "build"; built earlier (tools/processes/builds.py)
    if (failure := reply_failure(built, "build")) is not None:
        return failure
    passed(ev.result, "build")
    return None
