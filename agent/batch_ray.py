"""`ratchet batch SUITE --ray ADDRESS`: one Ray task per problem, the workspace on the driver.

`connect(address, ...)` joins (or, for `local`, starts) a Ray cluster; `RayScheduler` is an
agent.batch.Scheduler on it. Each problem is one task that needs one GPU (in CPU mode one CPU
slot, under Triton's interpreter) and runs the whole agent loop where Ray places it:
`fn(spec, channel)` (agent.batch_remote.run_remote_problem), whose every workspace read and write
is a request to the driver's WorkspaceService over the Ray channel (agent.batch_ray_channel).
Nothing needs a shared file system.

- Warm workers: the tasks run with `max_calls=0`, so a node's Ray worker process is reused for
  the next problem it is given (Ray's default for GPU tasks is a fresh process per task). What
  stays warm is the process with its imports (torch, triton, the agent), its CUDA context, and
  the node's caches on disk (Triton's kernel cache, torch.compile's, the evaluator's baselines).
  Each problem still gets its own evaluator (its reference worker is the problem's).
- Faults: a task whose worker or node dies is retried by Ray (`max_retries`) wherever there is
  room; the retry takes the problem's lease again, which fences the old token, and continues from
  the last attempt committed in the driver's workspace. An exception raised by the task is not
  retried (it would fail again). Rows come back with `"executor": "ray"`, the node (host and Ray
  node id) and the GPU.
- Cancelling (Ctrl-C, SIGTERM): every running task is cancelled gracefully (KeyboardInterrupt in
  the task: the agent closes its evaluator and with it the sandboxed worker tree), then by force
  after `GRACE_S` (the Ray worker is killed; each evaluator worker has PR_SET_PDEATHSIG, and
  bubblewrap --die-with-parent, so the tree dies with it). Ray's memory killer kills the worker
  the same way; that task is retried.
- Code and secrets: the project's code reaches the nodes either shipped by Ray (`code="ship"`, the
  default: runtime_env py_modules of the `agent` and `tools` packages and the `prompts/`
  templates, so every node runs the driver's exact code and needs only the dependencies
  installed) or installed there (`code="installed"`: `pip install -e '.[ray]'` on each node, no
  runtime_env). Neither the specs nor the runtime_env carry an API key: a node reads its own
  OPENAI_API_KEY / RATCHET_API_KEY / config file, or the variable named by `api_key_env`.
"""
from __future__ import annotations

import concurrent.futures
import os
import socket
import sys
import threading
import time
from collections import deque
from collections.abc import Callable
from pathlib import Path
from typing import Any

from agent.batch_ray_channel import MailboxServer, RayChannel, mailbox_actor

PROJECT_ROOT = Path(__file__).resolve().parent.parent
INSTALL_LINE = "--ray needs Ray: pip install -e '.[ray]'"
TASK_NAME = "ratchet_problem"  # the task's name; a busy worker's process title is `ray::ratchet_problem`
MAX_RETRIES = 3  # retries of a task whose worker or node died
GRACE_S = 15.0  # after a graceful cancel, how long tasks may take to stop before they are killed
CODE_MODES = ("ship", "installed")
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
    try:
        info = ray.init(**options)
    except (ConnectionError, TimeoutError, RuntimeError, ValueError) as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise ClusterError(f"--ray {address}: cannot reach the Ray cluster: {first}") from None
    resources = ray.cluster_resources()
    return {"executor": "ray", "address": address, "code": code,
            "nodes": sum(1 for node in ray.nodes() if node.get("Alive")),
            "cluster_gpus": int(resources.get("GPU", 0)), "cluster_cpus": int(resources.get("CPU", 0)),
            "ray": ray.__version__, "dashboard": getattr(info, "dashboard_url", None) or None}


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


def run_on_node(fn: Callable[[dict[str, Any], Any], dict[str, Any]], spec: dict[str, Any], mailbox: Any,
                env: dict[str, str], api_key_env: str | None) -> dict[str, Any]:
    """The Ray task: set up the node's environment, run `fn(spec, channel)`, say where it ran."""
    import ray

    os.environ.update(env)  # CPU mode: no GPU, Triton's interpreter; a suite's SUITE_SCALE
    _find_prompts()
    if api_key_env:
        key = os.environ.get(api_key_env)
        if not key:
            raise RuntimeError(f"--api-key-env {api_key_env}: not set on node {socket.gethostname()}")
        spec = {**spec, "settings": {**spec.get("settings", {}), "api_key": key}}  # on the node only
    gpus = ",".join(str(g) for g in ray.get_gpu_ids()) or None
    node_id = ray.get_runtime_context().get_node_id()
    row = fn({**spec, "executor": "ray", "node": socket.gethostname(), "gpu": gpus}, RayChannel(mailbox))
    row["ray_node_id"] = node_id
    return row


def _find_prompts() -> None:
    """Shipped code: `prompts/` is its own py_module, not next to `agent/`; tell agent.render."""
    if os.environ.get("RATCHET_PROMPTS") or (Path(__file__).resolve().parent.parent / "prompts").is_dir():
        return
    for entry in sys.path:
        candidate = Path(entry) / "prompts"
        if (candidate / "feedback_ok.j2").is_file():
            os.environ["RATCHET_PROMPTS"] = str(candidate)
            return


class TaskFailed(Exception):
    """A problem's task ended without a row (its retries spent, or it raised); str() is one line."""


class RayScheduler:
    """An agent.batch.Scheduler on the connected Ray cluster (see the module docstring).
    `handle` is the driver's WorkspaceService.handle; `cpu_slots` selects CPU mode with that many
    problems at a time, else every problem takes one GPU. `submit(fn, spec)` runs
    `fn(spec, channel)` on a node."""

    def __init__(self, handle: Callable[[Any], Any], *, cpu_slots: int | None = None, env: dict[str, str] | None = None,
                 api_key_env: str | None = None, max_retries: int = MAX_RETRIES, grace_s: float = GRACE_S,
                 warn: Callable[[str], None] = lambda line: None):
        ray = ray_module()
        self.grace_s = grace_s
        self.api_key_env = api_key_env
        resources = ray.cluster_resources()
        if cpu_slots is not None:
            self.device, self.slots = "cpu", cpu_slots
            self.env = {"CUDA_VISIBLE_DEVICES": "", "TRITON_INTERPRET": "1", **(env or {})}
            needs: dict[str, Any] = {"num_cpus": 1, "num_gpus": 0}
        else:
            self.slots = int(resources.get("GPU", 0))
            if not self.slots:
                raise ClusterError("the Ray cluster has no GPU: run on its CPUs with --cpu-workers N")
            self.device, self.env, needs = "cuda:0", dict(env or {}), {"num_gpus": 1}
        self.limit = cpu_slots  # CPU mode: at most this many tasks at a time, whatever CPUs the cluster has
        self._task = ray.remote(max_calls=0, max_retries=max_retries, retry_exceptions=False,
                                **needs)(run_on_node).options(name=TASK_NAME)
        self.mailbox = mailbox_actor()
        self.server = MailboxServer(self.mailbox, handle, warn=warn)
        self._lock = threading.Lock()
        self._running: dict[Any, tuple[concurrent.futures.Future, str]] = {}
        self._queued: deque = deque()
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
            elif self.limit is not None and len(self._running) >= self.limit:
                self._queued.append((future, fn, spec))
            else:
                self._launch(future, fn, spec)
        return future

    def _launch(self, future: concurrent.futures.Future, fn: Callable, spec: dict[str, Any]) -> None:
        if not future.set_running_or_notify_cancel():
            return
        ref = self._task.remote(fn, node_spec(spec, self.device), self.mailbox, self.env, self.api_key_env)
        self._running[ref] = (future, spec.get("key", "?"))

    def _watch(self) -> None:
        import ray

        while True:
            with self._lock:
                refs = list(self._running)
                if self._stopping and not refs:
                    return
            if not refs:
                time.sleep(0.2)
                continue
            ready, _ = ray.wait(refs, num_returns=1, timeout=0.5)
            for ref in ready:
                with self._lock:
                    future, key = self._running.pop(ref)
                    if self._queued and not self._stopping:
                        self._launch(*self._queued.popleft())
                _settle(future, ref, key)

    def shutdown(self, cancel: bool = False) -> None:
        import ray

        with self._lock:
            self._stopping = True
            queued, self._queued = list(self._queued), deque()
            refs = list(self._running)
        for future, _, _ in queued:
            future.cancel()
        if cancel and refs:
            for ref in refs:
                ray.cancel(ref, force=False)  # KeyboardInterrupt in the task: the agent closes its evaluator
            _, left = ray.wait(refs, num_returns=len(refs), timeout=self.grace_s)
            for ref in left:
                ray.cancel(ref, force=True)  # the worker is killed; its evaluator's workers die with it
        self._watcher.join(timeout=self.grace_s + 10)
        self.server.stop()
        ray.shutdown()


def _settle(future: concurrent.futures.Future, ref: Any, key: str) -> None:
    """Hand a finished task's row (or why there is none) to the driver's future."""
    import ray
    from ray.exceptions import RayTaskError, TaskCancelledError

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
    except Exception as exc:  # noqa: BLE001 - WorkerCrashedError, NodeDiedError, ...: its retries are spent
        future.set_exception(TaskFailed(f"{key}: the Ray task died ({type(exc).__name__}) and its retries are spent"))
