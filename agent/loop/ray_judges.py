"""`ratchet optimize MODULE.py --ray ADDRESS`: one problem's candidates judged on a Ray cluster's GPUs.

The run itself (the model's conversation, the graph, the workspace, its commits) stays on this
machine; only judging moves. Each judge is a Ray actor holding one GPU (`num_gpus=1`: it sees it as
cuda:0; in CPU mode, `--device cpu`, one CPU each, under Triton's interpreter) and one
tools.Evaluator of the problem, made there from the problem's text (nothing needs a shared file
system). On this machine each actor is a `RayJudge`, which the run's `Judges` (agent/loop/judges.py)
takes as it takes a local evaluator: one candidate at a time per judge, the first free one in
order, so a wide step's candidates are judged at once, each alone on its card
(docs/integrity.md), and at width 1 every attempt is judged by the first judge.

- How many: `--judges N`, or one per GPU of the cluster. More than the cluster has is refused
  (Ray would wait for them for ever).
- Baselines: every judge measures eager, torch.compile and the roofline on its own card when it
  starts, all judges at once, before any candidate; each record's speedups are against its own
  card's eager, as over `--device cuda:0,cuda:1` (docs/search.md: cards of one model are assumed
  alike within the best rule's offset). The first judge's problem and baseline are the run's.
- Where: each record's environment names the host and GPU that judged it; the run's summary lists
  the judges (`judges`: host, Ray node, GPU, attempts judged).
- Faults: an evaluation that raises there raises here as its own exception (the agent commits it
  as verdict error, an evaluator fault, and the source may be judged again). A judge whose process
  or node died is restarted by Ray (`MAX_RESTARTS`), which makes its evaluator again and measures
  its baselines again; its next call waits for that. The candidate it was judging is an evaluator
  fault. Nothing is retried by Ray itself: a candidate is never judged twice behind the run's back.
- The end: every judge's evaluator is closed (its sandboxed workers with it), then the actor is
  killed; a judge's workers die with its process in any case (PR_SET_PDEATHSIG, bubblewrap's
  --die-with-parent).
- Code: shipped to the nodes as `ratchet batch --ray` ships it (agent.batch.ray_slots.connect).
"""
from __future__ import annotations

import contextlib
import os
import shutil
import socket
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

MAX_RESTARTS = 3  # a judge whose process or node died is made again, at most this often
CLOSE_TIMEOUT_S = 120.0  # for each judge to close its evaluator at the end, before it is killed
REVIVE_S = 900.0  # for a judge Ray is making again (a new process: imports, evaluator, baselines)


@dataclass(frozen=True)
class RayJudging:
    """The command line's `--ray ADDRESS [--judges N] [--ray-code ship|installed]`."""

    address: str
    judges: int | None = None  # None: one per GPU of the cluster (in CPU mode: one)
    code: str = "ship"


class JudgeActor:
    """Runs on a node (made a Ray actor by `ray_judges`): one evaluator of the problem, on the device it holds."""

    def __init__(self, text: str, name: str, entry: str, options: Any) -> None:
        from tools import Evaluator

        self.scratch = Path(tempfile.mkdtemp(prefix="ratchet-judge-"))
        path = self.scratch / name
        path.write_text(text)
        try:
            self.evaluator = Evaluator(path, options, entry=entry)
            self.evaluator.baseline()  # on this card, before any candidate: every judge at once
        except BaseException:
            shutil.rmtree(self.scratch, ignore_errors=True)
            raise

    def ready(self) -> dict[str, Any]:
        """What the run needs of this judge: the problem as read here, its baseline, and where it is."""
        import ray

        from tools.env import environment

        device = self.evaluator.device
        gpu = environment(device)["gpu"] if device.startswith("cuda") else None
        return {"problem": self.evaluator.problem, "baseline": self.evaluator.baseline(), "device": device,
                "host": socket.gethostname(), "node": ray.get_runtime_context().get_node_id(),
                "gpu": gpu, "gpu_ids": [str(g) for g in ray.get_gpu_ids()], "pid": os.getpid()}

    def evaluate(self, source: str) -> Any:
        return self.evaluator.evaluate(source)

    def baseline(self) -> dict[str, Any]:
        return self.evaluator.baseline()

    def counters(self, source: str) -> Any:
        return self.evaluator.counters(source)

    def counters_unavailable(self) -> str | None:
        return self.evaluator.counters_unavailable()

    def close(self) -> None:
        try:
            self.evaluator.close()
        finally:
            shutil.rmtree(self.scratch, ignore_errors=True)


class RayJudge:
    """A judge on the cluster, as the run sees an evaluator (agent.loop.session.Evaluating)."""

    def __init__(self, actor: Any, facts: dict[str, Any], problem: Path) -> None:
        self.actor = actor
        self.problem = replace(facts["problem"], path=problem)  # the driver's file, as a local evaluator's
        self.device: str = facts["device"]
        self.target = facts["gpu"]  # the GPU's name as the node's driver gives it (None on a CPU)
        self._known(facts)
        self.judged = 0
        self.restarts = 0
        self._lost = False  # its process died: Ray is making it again
        self._lock = threading.Lock()

    def _known(self, facts: dict[str, Any]) -> None:
        self.where = {k: facts[k] for k in ("host", "node", "device", "gpu", "gpu_ids")}
        self._baseline = facts["baseline"]

    def _revive(self) -> None:
        """After its process died: wait until Ray has made the judge again (its evaluator, its
        baselines: `ready` asks nothing of a candidate, so it may be asked again), or raise once it
        is gone for good (ActorDiedError) or not back within REVIVE_S."""
        import ray

        deadline = time.monotonic() + REVIVE_S
        while True:
            try:
                facts = ray.get(self.actor.ready.remote())
                break
            except ray.exceptions.ActorUnavailableError:  # restarting
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.5)
        self._known(facts)
        self._lost = False
        self.restarts += 1

    def _call(self, method: str, *args: Any) -> Any:
        import ray

        if self._lost:
            self._revive()
        try:
            return ray.get(getattr(self.actor, method).remote(*args))
        except ray.exceptions.RayTaskError as exc:  # the evaluator's own exception, not Ray's wrapper
            raise exc.as_instanceof_cause() from None
        except ray.exceptions.RayActorError:  # its process died under the call: a fault, and it comes back
            self._lost = True
            raise

    def evaluate(self, source: str) -> Any:
        with self._lock:
            self.judged += 1
        return self._call("evaluate", source)

    def baseline(self) -> dict[str, Any]:
        return dict(self._baseline)

    def counters(self, source: str) -> Any:
        return self._call("counters", source)

    def counters_unavailable(self) -> str | None:
        return self._call("counters_unavailable")

    def summary(self) -> dict[str, Any]:
        return {**self.where, "judged": self.judged, "restarts": self.restarts}


class JudgesUnavailable(Exception):
    """The cluster cannot give the judges asked for (no GPU, too few); one line."""


def judge_count(wanted: int | None, *, gpus: int, cpu: bool) -> int:
    """How many judges to start: `wanted`, or one per GPU (one in CPU mode). JudgesUnavailable when
    the cluster cannot hold them."""
    if cpu:
        return wanted or 1
    if gpus == 0:
        raise JudgesUnavailable("the Ray cluster has no GPU to judge on (give --device cpu to judge on its CPUs)")
    if wanted is not None and wanted > gpus:
        raise JudgesUnavailable(f"--judges {wanted}: the Ray cluster has {gpus} GPU{'s' if gpus != 1 else ''}")
    return wanted or gpus


@contextlib.contextmanager
def ray_judges(problem: Path, options: Any, entry: str, ray: RayJudging, log: Any) -> Iterator[list[RayJudge]]:
    """Connect to the cluster, start the judges (all at once: each measures its baselines), yield
    them in order, and close them at the end. ClusterError (agent.batch.ray_slots) when the
    cluster cannot be reached; JudgesUnavailable when it cannot hold the judges."""
    from agent.batch.ray_slots import connect, ray_module

    ray_lib = ray_module()
    cpu = options.device == "cpu"
    actors: list[Any] = []
    # Ray's driver prints its raylets' messages (a worker died, say) on stdout, which is the summary's
    with contextlib.redirect_stdout(sys.stderr):
        try:
            info = connect(ray.address, code=ray.code)
            count = judge_count(ray.judges, gpus=info["cluster_gpus"], cpu=cpu)
            on_node = replace(options, device="cpu" if cpu else "cuda:0")  # the one GPU Ray gave the actor
            resources = {"num_cpus": 1} if cpu else {"num_gpus": 1}
            remote = ray_lib.remote(max_restarts=MAX_RESTARTS, max_task_retries=0, **resources)(JudgeActor)
            text = problem.read_text()
            actors = [remote.remote(text, problem.name, entry, on_node) for _ in range(count)]
            log(f"judging on Ray ({ray.address}): starting {count} judge{'s' if count != 1 else ''}, "
                f"each measuring its baselines")
            try:
                facts = ray_lib.get([a.ready.remote() for a in actors])
            except ray_lib.exceptions.RayTaskError as exc:  # the evaluator's own error (ProblemError, SandboxUnavailable)
                raise exc.as_instanceof_cause() from None
            except ray_lib.exceptions.RayActorError as exc:  # the judge's constructor raised, or its process died
                cause = getattr(exc, "cause", None)
                raise (cause.as_instanceof_cause() if isinstance(cause, ray_lib.exceptions.RayTaskError) else exc) from None
            judges = [RayJudge(a, f, problem) for a, f in zip(actors, facts)]
            for j in judges:
                log(f"judge: {j.where['host']} node {j.where['node'][:8]} {j.device}" + (f" ({j.target})" if j.target else ""))
            yield judges
        finally:
            _close(ray_lib, actors)
            ray_lib.shutdown()


def _close(ray_lib: Any, actors: list[Any]) -> None:
    """Each judge's evaluator closed (its workers with it), then its actor killed."""
    if not actors:
        return
    pending = [a.close.remote() for a in actors]
    ray_lib.wait(pending, num_returns=len(pending), timeout=CLOSE_TIMEOUT_S)  # an actor already dead returns its error
    for a in actors:
        ray_lib.kill(a, no_restart=True)
