"""`ratchet batch SUITE --ray ADDRESS`: one slot per GPU of a Ray cluster, the workspace on the driver.

`connect(address, ...)` joins (or, for `local`, starts) a Ray cluster; `RayScheduler` is an
agent.batch.driver.Scheduler on it. Each GPU of the cluster (in CPU mode, each of N CPU slots, under
Triton's interpreter) gets one `ProblemSlot` actor, which takes problems from the driver's queue
one at a time: each problem is one Ray actor task, `run(fn, spec, mailbox)`, that runs the whole
agent loop where the actor lives: `fn(spec, channel, pools=...)`
(agent.batch.remote.run_remote_problem), whose every workspace read and write is a request to the
driver's WorkspaceService over the Ray channel (agent.batch.ray_channel). Nothing needs a shared
file system.

- Warm evaluator per GPU: the actor's process lives for the batch, with its imports (torch,
  triton, the agent), its CUDA context, and a warm pool (tools/processes/warm.py): the next problem's
  reference worker and spare sandboxed candidate workers are started before that problem arrives.
  An actor rather than a task with `max_calls=0`: Ray may give a reused task worker another GPU,
  while a CUDA context stays on the GPU it was made on. Once no problem waits, idle actors end
  and give their GPU back. Rows say how many workers a problem found started (`warm_workers`).
- Faults: an actor whose process or node dies (Ray's memory killer included) is restarted by Ray
  (`max_restarts`) wherever there is room, and the problem it was running is run again there
  (`max_task_retries`); the retry takes the problem's lease again, which fences the old token,
  and continues from the last attempt committed in the driver's workspace. An exception raised by
  the problem is not retried (it would fail again). Rows come back with `"executor": "ray"`, the
  node (host and Ray node id) and the GPU.
- Cancelling (Ctrl-C, SIGTERM): every running problem gets a KeyboardInterrupt in its thread (Ray
  does not interrupt a running actor method; `ProblemSlot.interrupt` does): the agent closes its
  evaluator, and with it the sandboxed worker tree. Actors still running after `GRACE_S` are
  killed; each evaluator worker has PR_SET_PDEATHSIG, and bubblewrap --die-with-parent, so the
  tree dies with the actor's process. Ray's memory killer kills the process the same way.
- Code and secrets: the project's code reaches the nodes either shipped by Ray (`code="ship"`, the
  default: runtime_env py_modules of the `agent` and `tools` packages and the `prompts/`
  templates, so every node runs the driver's exact code and needs only the dependencies
  installed) or installed there (`code="installed"`: `pip install -e '.[ray]'` on each node, no
  runtime_env). Neither the specs nor the runtime_env carry an API key: a node reads its own
  OPENAI_API_KEY / RATCHET_API_KEY / config file, or the variable named by `api_key_env`.
"""
from __future__ import annotations

import concurrent.futures
import ctypes
import os
import socket
import sys
import threading
import time
from collections import deque
from collections.abc import Callable
from pathlib import Path
from typing import Any

from agent.batch.ray_channel import SERVICE_THREADS, MailboxServer, RayChannel, mailbox_actor

PROJECT_ROOT = Path(__file__).resolve().parents[2]
INSTALL_LINE = "--ray needs Ray: pip install -e '.[ray]'"
MAX_RETRIES = 3  # restarts of a slot's actor whose process or node died, and re-runs of its problem
GRACE_S = 15.0  # after an interrupt, how long problems may take to stop before their actors are killed
CODE_MODES = ("ship", "installed")
# a ray:// connection's server, forked for it on the cluster, dies at its start in a few percent of
# connects (a gRPC fork race, ray-project/ray#63202; seen once in our CI): that failure is tried again
CLIENT_START_TRIES = 3
CLIENT_START_FAILED = "Starting Ray client server failed"
# what a spec may carry to a node: no driver path (the sources come with the lease), no secret
NODE_SPEC_DROP = ("log", "config_file")


class ClusterError(Exception):
    """The cluster named by --ray could not be reached or started, or cannot run the batch; one line."""


def ray_module() -> Any:
    """Ray, or a ClusterError-free one-line ImportError message for the command line."""
    try:
        import ray
    except ImportError:
        raise ImportError(INSTALL_LINE) from None
    return ray


def runtime_env(code: str) -> dict[str, Any]:
    """What Ray ships to the nodes: code only, never a secret (see the module docstring)."""
    if code not in CODE_MODES:
        raise ValueError(f"code must be one of {', '.join(CODE_MODES)}, not {code!r}")
    if code == "installed":
        return {}
    return {"py_modules": [str(PROJECT_ROOT / name) for name in ("agent", "tools", "prompts")]}


def connect(address: str, *, cpu_workers: int | None = None, code: str = "ship") -> dict[str, Any]:
    """Join the cluster at `address` (`auto`, `HOST:PORT`, `ray://HOST:PORT`) or, for `local`,
    start a Ray instance on this host (with `cpu_workers` CPU slots in CPU mode). Returns what
    run.json records. Raises ImportError(INSTALL_LINE) without Ray, ClusterError when the cluster
    cannot be reached."""
    ray = ray_module()
    options: dict[str, Any] = {"runtime_env": runtime_env(code), "logging_level": "ERROR", "log_to_driver": False}
    if address == "local":
        options.update(address="local", include_dashboard=False)  # a new instance, even if one runs here
        if cpu_workers is not None:
            options.update(num_cpus=cpu_workers)
    else:
        _reachable(address)
        options["address"] = address
    tries = CLIENT_START_TRIES if address.startswith("ray://") else 1
    for attempt in range(1, tries + 1):
        try:
            info = ray.init(**options)
            break
        except (ConnectionError, TimeoutError, RuntimeError, ValueError) as exc:
            if attempt < tries and CLIENT_START_FAILED in str(exc):
                ray.shutdown()  # the cluster's server for this client died as it started: ask for another
                time.sleep(1.0)
                continue
            raise ClusterError(f"--ray {address}: cannot reach the Ray cluster: {_cause(exc)}") from None
    resources = ray.cluster_resources()
    return {"executor": "ray", "address": address, "code": code,
            "nodes": sum(1 for node in ray.nodes() if node.get("Alive")),
            "cluster_gpus": int(resources.get("GPU", 0)), "cluster_cpus": int(resources.get("CPU", 0)),
            "ray": ray.__version__, "dashboard": getattr(info, "dashboard_url", None) or None}


def _cause(exc: BaseException) -> str:
    """One line for an error Ray raises at connect: its first line and, when Ray appended a server's
    traceback under it ("Initialization failure from server:" and the rest), that traceback's last
    line, the exception that says why."""
    lines = [line.strip() for line in str(exc).strip().splitlines() if line.strip()]
    if not lines:
        return type(exc).__name__
    if len(lines) == 1:
        return lines[0]
    return f"{lines[0].rstrip(':')}: {lines[-1]}"


def _reachable(address: str, timeout_s: float = 5.0) -> None:
    """A HOST:PORT (or ray://HOST:PORT) that takes no TCP connection fails here in seconds, not after
    Ray's own minute of retries."""
    if address == "auto":
        return
    host, _, port = address.removeprefix("ray://").rpartition(":")
    if not host or not port.isdigit():
        raise ClusterError(f"--ray {address}: expected local, auto, HOST:PORT or ray://HOST:PORT")
    try:
        socket.create_connection((host, int(port)), timeout=timeout_s).close()
    except OSError as exc:
        raise ClusterError(f"--ray {address}: cannot reach the Ray cluster: {exc.strerror or exc}") from None


def node_spec(spec: dict[str, Any], device: str) -> dict[str, Any]:
    """The spec as it travels to a node: no driver paths, the device as the node's worker sees it."""
    return {**{k: v for k, v in spec.items() if k not in NODE_SPEC_DROP}, "device": device}


class ProblemSlot:
    """The Ray actor behind one slot: one GPU (or one CPU in CPU mode) for the whole batch. It runs
    the problems the driver gives it one at a time, `fn(spec, channel, pools=...)` in its own
    process, and keeps the evaluator's warm pool (tools/processes/warm.py) from one problem to the next.

    An actor rather than a task per problem: a Ray worker process reused by GPU tasks may be given
    another GPU for its next task, while its CUDA context (the evaluator's parent uses the device)
    stays on the first one. An actor holds its GPU for life."""

    def __init__(self, env: dict[str, str], api_key_env: str | None) -> None:
        from tools.processes.warm import WarmPools

        os.environ.update(env)  # CPU mode: no GPU, Triton's interpreter; a suite's SUITE_SCALE
        _find_prompts()
        self.api_key_env = api_key_env
        self.pools = WarmPools()
        self._running: int | None = None  # the thread running a problem (interrupt() targets it)

    def run(self, fn: Callable[..., dict[str, Any]], spec: dict[str, Any], mailbox: Any) -> dict[str, Any]:
        """Set up the node's side of the spec, run `fn`, say where it ran."""
        import ray

        if self.api_key_env:
            key = os.environ.get(self.api_key_env)
            if not key:
                raise RuntimeError(f"--api-key-env {self.api_key_env}: not set on node {socket.gethostname()}")
            spec = {**spec, "settings": {**spec.get("settings", {}), "api_key": key}}  # on the node only
        gpus = ",".join(str(g) for g in ray.get_gpu_ids()) or None
        node_id = ray.get_runtime_context().get_node_id()
        before = self.pools.taken()
        self._running = threading.get_ident()
        try:
            row = fn({**spec, "executor": "ray", "node": socket.gethostname(), "gpu": gpus}, RayChannel(mailbox),
                     pools=self.pools)
        finally:
            self._running = None
        row["ray_node_id"] = node_id
        # workers this problem's evaluator found started (by the previous problem on this slot)
        row["warm_workers"] = {role: n - before.get(role, 0) for role, n in self.pools.taken().items()}
        return row

    def interrupt(self) -> bool:
        """KeyboardInterrupt in the running problem's thread, as a cancelled task gets (Ray does not
        interrupt a running actor method): the agent stops and closes its evaluator. False when idle."""
        thread = self._running
        if thread is None:
            return False
        ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(thread), ctypes.py_object(KeyboardInterrupt))
        return True

    def close(self) -> None:
        """Stop the slot's warm workers and remove their scratch; the driver then kills the actor
        (ray.kill, no restart). Not ray.actor.exit_actor(): Ray retries a method whose actor exits."""
        self.pools.close()


def _find_prompts() -> None:
    """Shipped code: `prompts/` is its own py_module, not next to `agent/`; tell agent.loop.render."""
    if os.environ.get("RATCHET_PROMPTS") or (PROJECT_ROOT / "prompts").is_dir():
        return
    for entry in sys.path:
        candidate = Path(entry) / "prompts"
        if (candidate / "feedback_ok.j2").is_file():
            os.environ["RATCHET_PROMPTS"] = str(candidate)
            return


class TaskFailed(Exception):
    """A problem's task ended without a row (its retries spent, or it raised); str() is one line."""


class RayScheduler:
    """An agent.batch.driver.Scheduler on the connected Ray cluster (see the module docstring).
    `handle` is the driver's WorkspaceService.handle; `cpu_slots` selects CPU mode with that many
    problems at a time, else every GPU of the cluster is a slot. `submit(fn, spec)` runs
    `fn(spec, channel, pools=...)` on a slot's actor (ProblemSlot)."""

    def __init__(self, handle: Callable[[Any], Any], *, cpu_slots: int | None = None, env: dict[str, str] | None = None,
                 api_key_env: str | None = None, max_retries: int = MAX_RETRIES, grace_s: float = GRACE_S,
                 warn: Callable[[str], None] = lambda line: None):
        ray = ray_module()
        self.grace_s = grace_s
        resources = ray.cluster_resources()
        if cpu_slots is not None:
            self.device, self.slots = "cpu", cpu_slots
            env = {"CUDA_VISIBLE_DEVICES": "", "TRITON_INTERPRET": "1", **(env or {})}
            needs: dict[str, Any] = {"num_cpus": 1, "num_gpus": 0}
        else:
            self.slots = int(resources.get("GPU", 0))
            if not self.slots:
                raise ClusterError("the Ray cluster has no GPU: run on its CPUs with --cpu-workers N")
            self.device, needs = "cuda:0", {"num_cpus": 0, "num_gpus": 1}
        # a dead actor (its process or node died, Ray's memory killer) is restarted, wherever there is room,
        # and the problem it was running is run again there: it takes the lease again and continues
        self._actor_class = ray.remote(ProblemSlot).options(
            **needs, max_restarts=max_retries, max_task_retries=max_retries, max_concurrency=2)
        self._actor_args = (dict(env or {}), api_key_env)
        self.mailbox = mailbox_actor()
        self.server = MailboxServer(self.mailbox, handle, warn=warn, threads=max(SERVICE_THREADS, self.slots))
        self._lock = threading.Lock()
        self._idle: list[Any] = []  # actors waiting for a problem
        self._actors = 0  # actors alive (idle or running)
        self._running: dict[Any, tuple[concurrent.futures.Future, str, Any]] = {}  # ref -> (future, key, actor)
        self._queued: deque = deque()
        self._closing: dict[Any, Any] = {}  # ref of a released actor's close() -> the actor, killed when it is done
        self._stopping = False
        self._watcher = threading.Thread(target=self._watch, name="ray-results", daemon=True)
        self._watcher.start()

    def describe(self) -> str:
        what = f"{self.slots} CPU slot(s)" if self.device == "cpu" else f"{self.slots} GPU(s)"
        return f"Ray: {what}"

    def submit(self, fn: Callable[..., dict[str, Any]], spec: dict[str, Any]) -> concurrent.futures.Future:
        future: concurrent.futures.Future = concurrent.futures.Future()
        with self._lock:
            if self._stopping:
                future.cancel()
            else:
                self._queued.append((future, fn, spec))
                self._dispatch()
        return future

    def _dispatch(self) -> None:
        """Give queued problems to idle actors, making actors up to the slot count; release the idle
        ones once nothing waits (a restarted actor may need their GPU). Under the lock."""
        while self._queued:
            if not self._idle:
                if self._actors >= self.slots:
                    return
                self._idle.append(self._actor_class.remote(*self._actor_args))
                self._actors += 1
            future, fn, spec = self._queued.popleft()
            if not future.set_running_or_notify_cancel():
                continue
            actor = self._idle.pop()
            ref = actor.run.remote(fn, node_spec(spec, self.device), self.mailbox)
            self._running[ref] = (future, spec.get("key", "?"), actor)
        while self._idle:
            self._release(self._idle.pop())

    def _release(self, actor: Any) -> None:
        """End an actor: its warm workers first (close), then its process (killed once close is done)."""
        self._closing[actor.close.remote()] = actor
        self._actors -= 1

    def _watch(self) -> None:
        import ray

        while True:
            with self._lock:
                refs = list(self._running)
                if self._stopping and not refs:
                    return
                refs += list(self._closing)
            if not refs:
                time.sleep(0.2)
                continue
            ready, _ = ray.wait(refs, num_returns=1, timeout=0.5)
            for ref in ready:
                with self._lock:
                    closed = self._closing.pop(ref, None)
                    if closed is None:
                        future, key, actor = self._running.pop(ref)
                if closed is not None:
                    ray.kill(closed, no_restart=True)
                    continue
                alive = _settle(future, ref, key)
                with self._lock:
                    if not alive:
                        self._actors -= 1  # its restarts are spent: a new actor takes the slot
                    elif self._stopping:
                        self._release(actor)
                    else:
                        self._idle.append(actor)
                    if not self._stopping:
                        self._dispatch()

    def shutdown(self, cancel: bool = False) -> None:
        import ray

        with self._lock:
            self._stopping = True
            queued, self._queued = list(self._queued), deque()
            running = dict(self._running)
            idle, self._idle = list(self._idle), []
            for actor in idle:
                self._release(actor)
        for future, _, _ in queued:
            future.cancel()
        if cancel and running:
            for _, _, actor in running.values():
                actor.interrupt.remote()  # KeyboardInterrupt in the problem: the agent closes its evaluator
            refs = list(running)
            _, left = ray.wait(refs, num_returns=len(refs), timeout=self.grace_s)
            for ref in left:
                ray.kill(running[ref][2], no_restart=True)  # its evaluator's workers die with its process
        self._watcher.join(timeout=self.grace_s + 10)
        with self._lock:
            closing, self._closing = dict(self._closing), {}
        if closing:  # let released slots remove their warm workers' scratch before they go
            ray.wait(list(closing), num_returns=len(closing), timeout=self.grace_s)
            for actor in closing.values():
                ray.kill(actor, no_restart=True)
        self.server.stop()
        ray.shutdown()


def _settle(future: concurrent.futures.Future, ref: Any, key: str) -> bool:
    """Hand a finished problem's row (or why there is none) to the driver's future; False when the
    actor that ran it is dead for good (its restarts spent)."""
    import ray
    from ray.exceptions import RayActorError, RayTaskError, TaskCancelledError

    try:
        future.set_result(ray.get(ref))
    except TaskCancelledError:
        future.set_exception(concurrent.futures.CancelledError())
    except RayTaskError as exc:
        cause = exc.cause if isinstance(exc.cause, BaseException) else exc
        if isinstance(cause, (KeyboardInterrupt, TaskCancelledError)):
            future.set_exception(concurrent.futures.CancelledError())
        else:
            future.set_exception(TaskFailed(f"{key}: the Ray task raised {type(cause).__name__}: {cause}"))
    except RayActorError as exc:
        future.set_exception(TaskFailed(f"{key}: the Ray actor died ({type(exc).__name__}) and its restarts are spent"))
        return False
    except Exception as exc:  # noqa: BLE001 - NodeDiedError, ObjectLostError, ...: its retries are spent
        future.set_exception(TaskFailed(f"{key}: the Ray task died ({type(exc).__name__}) and its retries are spent"))
        return False
    return True
