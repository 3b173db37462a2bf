"""Hardware counters for one candidate: its source built in a worker that runs under Nsight
Compute inside the candidate's own sandbox, one forward on the problem's inputs counted, and the
digest the model reads (tools/counters/ncu.py). Advice, not a verdict: nothing here is recorded
in the result or changes a reward.

Where the counters cannot be read confined (no GPU, no bubblewrap, no ncu, or a driver that lets
only administrators read them), the answer says so and nothing runs unconfined.
"""
from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from tools.counters import ncu as nsight
from tools.judge import build, static
from tools.judge.evaluation import Evaluation
from tools.judge.verdict import reply_failure
from tools.processes.allowance import Allowance
from tools.processes.process import WorkerGone, WorkerProcess
from tools.sandbox import Wrapper

if TYPE_CHECKING:
    from tools.judge.bench import Bench
    from tools.record import Result

COUNTED_TIMEOUT_S = 300.0  # the counted forward: ncu replays each kernel once per counter pass
EXIT_GRACE_S = 60.0  # for ncu to write its results once the worker exits


@dataclass
class Counters:
    """What the model gets back from get_ncu_profile."""

    available: bool
    reason: str | None = None  # why there are none (one line)
    kernels: list[dict[str, Any]] = field(default_factory=list)
    seconds: float = 0.0

    def as_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def unavailable(bench: "Bench", sandboxed: bool) -> str | None:
    """Why counters cannot be read confined here, before anything starts; None if they may be."""
    if not bench.device.startswith("cuda"):
        return "hardware counters need a GPU; this evaluator runs on the CPU"
    if not sandboxed:
        return ("hardware counters are read only inside bubblewrap, the candidate's own sandbox, which this "
                "evaluator lacks (--sandbox best-effort without bwrap); ratchet does not read them unconfined")
    if nsight.find_ncu() is None:
        return "Nsight Compute (ncu) is not installed here (or RATCHET_NCU names no file)"
    return None


def measure(bench: "Bench", spawn: Callable[[Wrapper], WorkerProcess], new_result: Callable[[str], "Result"],
            source: str, *, sandboxed: bool) -> Counters:
    """Counters of `source`'s kernels in one forward on the problem's first trial inputs.
    `spawn(wrapper)` starts a candidate worker under the wrapper (Spawner.spawn)."""
    started = time.monotonic()
    why = unavailable(bench, sandboxed)
    if why is not None:
        return Counters(False, why)
    ncu = nsight.find_ncu()
    assert ncu is not None
    wrapper = Wrapper(nsight.command(ncu), nsight.installation(ncu), nsight.executables(ncu))
    evaluation = Evaluation(source, new_result(source))
    counted = dataclasses.replace(bench, take_worker=lambda: spawn(wrapper))
    try:
        for step in (static.static, build.cuda_build, build.worker, build.build):
            failure = step(counted, evaluation)
            if failure is not None:  # a driver that refuses the counters may stop the worker's start too
                log = evaluation.worker.log_tail(nsight.LOG_BYTES) if evaluation.worker is not None else ""
                denied = nsight.PERMISSION in log
                return Counters(False, nsight.refusal(nsight.PERMISSION) if denied else
                                f"the candidate did not build under the profiler: {failure.detail}"[:300])
        worker = evaluation.worker
        assert worker is not None
        # its own allowance: the build's was the evaluation's deadline, and ncu replays every kernel
        worker.allowance = Allowance(COUNTED_TIMEOUT_S)
        with bench.lock:  # the card to this forward alone: ncu serializes and replays its kernels
            trees, payload = bench.feed(worker, [(None, bench.seeds[0], "problem")])
            header, _ = worker.request({"op": "counters", "inputs": trees[0]}, COUNTED_TIMEOUT_S, payload)
        if (failure := reply_failure(header, "counters")) is not None:
            return Counters(False, f"the counted forward failed: {failure.detail}"[:300])
        worker.close(grace=EXIT_GRACE_S)
        text = worker.log_tail(nsight.LOG_BYTES)  # ncu's output is in it, after the worker's own
        kernels = nsight.parse(text)
    except WorkerGone as exc:
        text = evaluation.worker.log_tail(nsight.LOG_BYTES) if evaluation.worker is not None else ""
        return Counters(False, nsight.refusal(text) or f"the profiled worker stopped: {exc}"[:300],
                        seconds=round(time.monotonic() - started, 2))
    finally:
        if evaluation.worker is not None:
            evaluation.worker.kill()
    if not kernels:
        return Counters(False, nsight.refusal(text) or "Nsight Compute reported no kernel for the forward",
                        seconds=round(time.monotonic() - started, 2))
    own = list(evaluation.scan.triton_kernels + evaluation.scan.cuda_kernels) if evaluation.scan else []
    return Counters(True, kernels=nsight.digest(kernels, own), seconds=round(time.monotonic() - started, 2))

