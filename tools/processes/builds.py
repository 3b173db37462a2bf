"""What a candidate's worker compiles, where it is built, and what is kept for next time.

- CUDA C++ (load_inline) builds in a worker of its own, confined with the "build" profile (it may
  run /bin/sh, ninja, nvcc; it has no GPU), started early by `Evaluator.prebuild` or at the
  start of the evaluation. It hands the built extension to the parent, which keeps it in the
  source's namespace of the artifact cache (tools/processes/artifacts.py); the GPU worker, confined with
  the "run" profile (no shell, ninja or nvcc), gets it installed and loads it. A build that
  fails is a compile_error before any GPU worker is used.
- Triton's cache: a candidate worker compiles into its own scratch. After an evaluation that
  got as far as running, the parent asks the worker for what it compiled and keeps it in the
  source's namespace, installed again for the next evaluation of the same source. The
  evaluator's own kernels come from a worker that never held a candidate (the "tools" layer),
  installed into every new worker before it starts.

This module moves files and runs build workers; what a failed build means for a candidate is the
judge's to say (tools/judge/build.py reads a `CudaBuild`).
"""
from __future__ import annotations

import hashlib
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from tools.env import environment
from tools.processes.artifacts import ArtifactCache, ArtifactError
from tools.processes.process import WorkerGone, WorkerProcess
from tools.sandbox import paths

if TYPE_CHECKING:
    from tools.options import EvalOptions

Files = tuple[list[dict[str, Any]], bytes]
NO_FILES: Files = ([], b"")
ARTIFACT_REQUEST_S = 10.0


def toolchain(device: str) -> dict[str, Any]:
    """What a build product depends on besides its source."""
    env = environment(device)
    return {k: env.get(k) for k in ("device", "gpu", "capability", "cuda", "torch", "triton", "python")}


def executables(profile: str) -> list[Any]:
    return paths.executables(profile)


def _digest(source: str) -> str:
    return hashlib.sha256(source.encode()).hexdigest()


# the tools layer -----------------------------------------------------------------------------
def tools_layer(device: str, artifacts: ArtifactCache, chain: dict[str, Any]) -> Files | None:
    """The evaluator's own compiled kernels, installed into every new GPU worker (None: none kept)."""
    if not device.startswith("cuda"):
        return None
    return artifacts.get(artifacts.namespace("tools", "", chain))


@dataclass
class CudaBuild:
    """What building a load_inline source came to: the files to install (None: it failed), the
    build worker's reply (a failure it reports) or how it was lost, and the seconds it took."""

    files: Files | None
    reply: dict[str, Any] = field(default_factory=dict)
    lost: WorkerGone | None = None  # the build worker died or timed out
    unusable: str | None = None  # the files it handed over could not be kept
    waited_s: float | None = None  # what the evaluation waited for the build
    whole_s: float | None = None  # the build worker's whole run
    built: int = 0  # extensions built now (0: found built)


class Builds:
    """One evaluator's builds: the artifact cache's namespaces for its toolchain, and the CUDA C++
    build workers started ahead of need (`start`, by Evaluator.prebuild). Thread-safe."""

    def __init__(self, device: str, artifacts: ArtifactCache, chain: dict[str, Any], options: "EvalOptions",
                 spawn: Callable[[], WorkerProcess], reply_cap: Callable[[], int]) -> None:
        self.device, self.artifacts, self.toolchain, self.options = device, artifacts, chain, options
        self._spawn, self._reply_cap = spawn, reply_cap  # a build worker (no GPU); the largest reply it may send
        self._lock = threading.Lock()
        self.prebuilds: dict[str, WorkerProcess] = {}  # source digest -> its build worker, running
        # source digest -> set once a used worker of that source has handed its kernels over (reap)
        self._handing: dict[str, threading.Event] = {}

    def publish_tools_layer(self, worker: WorkerProcess) -> None:
        """Once per cache: keep what a fresh worker compiled for itself (Triton's driver module and
        the evaluator's own kernels), asked before it is handed any candidate."""
        if not self.device.startswith("cuda"):
            return
        namespace = self.artifacts.namespace("tools", "", self.toolchain)
        if self.artifacts.published(namespace):
            return
        header, payload = worker.request({"op": "artifacts"}, ARTIFACT_REQUEST_S)
        if header.get("op") == "artifacts":
            try:
                self.artifacts.put(namespace, header.get("files"), payload)
            except (ArtifactError, OSError):
                pass  # nothing kept: the next worker compiles them again

    def start(self, source: str) -> bool:
        """Start the build worker for a load_inline source (unless built, or building)."""
        digest = _digest(source)
        with self._lock:
            if "load_inline" not in source or digest in self.prebuilds:
                return False
            if self.artifacts.published(self.artifacts.namespace("cuda", digest, self.toolchain)):
                return False
            proc = self._spawn()
            proc.max_reply_bytes = self._reply_cap()
            proc.send({"op": "build", "source": source, "init": {"t": "list", "items": []}})
            self.prebuilds[digest] = proc
            return True

    def handing_over(self, source_hash: str) -> threading.Event | None:
        """A used worker of this source is about to hand its kernels over (reap, in a thread): the
        next evaluation of the source waits for them rather than compiling them again (a Triton
        GEMM's autotuned kernels took 3.2 s on an H100 when it looked too early)."""
        if not self.device.startswith("cuda"):
            return None
        event = threading.Event()
        with self._lock:
            self._handing[source_hash] = event
        return event

    def triton(self, source: str) -> Files | None:
        """Triton kernels an earlier evaluation of this source compiled (None: none kept); waits
        for a handover of this source still under way (at most its request's deadline)."""
        digest = _digest(source)
        with self._lock:
            handing = self._handing.get(digest)
        if handing is not None:
            handing.wait(ARTIFACT_REQUEST_S + 5)
        return self.artifacts.get(self.artifacts.namespace("triton", digest, self.toolchain))

    def cuda(self, source: str) -> CudaBuild:
        """The source's load_inline extensions: kept from an earlier build, or built now in a build
        worker of their own (started by `start` if it was not yet)."""
        digest = _digest(source)
        namespace = self.artifacts.namespace("cuda", digest, self.toolchain)
        found = self.artifacts.get(namespace)
        if found is not None:
            return CudaBuild(found)
        self.start(source)
        with self._lock:
            proc = self.prebuilds.pop(digest, None)
        if proc is None:  # another thread built it meanwhile
            return CudaBuild(self.artifacts.get(namespace) or NO_FILES)
        t0 = time.monotonic()
        outcome = CudaBuild(None)
        try:
            proc.wait_ready(self.options.start_timeout)
            outcome.reply, payload = proc.reply(self.options.build_timeout)
        except WorkerGone as exc:
            outcome.lost = exc
            return outcome
        finally:
            proc.close()
            now = time.monotonic()
            outcome.waited_s, outcome.whole_s = now - t0, now - proc.spawned_at
        if outcome.reply.get("op") == "error" or outcome.reply.get("violations"):
            return outcome
        try:
            self.artifacts.put(namespace, outcome.reply.get("files"), payload)
        except (ArtifactError, OSError) as exc:
            outcome.unusable = str(exc)
            return outcome
        outcome.files = self.artifacts.get(namespace) or NO_FILES
        outcome.built = len(outcome.reply.get("files") or [])
        return outcome

    def close(self) -> None:
        with self._lock:
            running, self.prebuilds = list(self.prebuilds.values()), {}
        for proc in running:
            proc.close()


def merge(parts: list[Files]) -> Files:
    """Several file sets as one install request's (manifest, payload)."""
    manifest: list[dict[str, Any]] = []
    chunks: list[bytes] = []
    offset = 0
    for entries, payload in parts:
        for e in entries:
            manifest.append({**e, "offset": e["offset"] + offset})
        chunks.append(payload)
        offset += len(payload)
    return manifest, b"".join(chunks)


# after an evaluation ----------------------------------------------------------------------------
def reap(builds: Builds, worker: WorkerProcess, source_hash: str, keep: bool,
         handed: threading.Event | None = None) -> None:
    """Keep what the worker compiled for this source (when it ran), then kill it (before the
    evaluation returns: tools/evaluate.py, `_dispose`); `handed` (Builds.handing_over) is set once
    the kernels are kept, or there is nothing to keep."""
    try:
        if keep and builds.device.startswith("cuda") and worker.alive():
            artifacts = builds.artifacts
            namespace = artifacts.namespace("triton", source_hash, builds.toolchain)
            if not artifacts.published(namespace):
                header, payload = worker.request({"op": "artifacts", "limit": artifacts.namespace_cap_bytes},
                                                 ARTIFACT_REQUEST_S)
                if header.get("op") == "artifacts" and not header.get("truncated"):
                    files = [f for f in header.get("files") or [] if str(f.get("path", "")).startswith("triton/")]
                    artifacts.put(namespace, files, payload)
    except (WorkerGone, ArtifactError, OSError):
        pass  # nothing kept: the next evaluation of this source compiles again
    finally:
        if handed is not None:
            handed.set()
        worker.kill()
