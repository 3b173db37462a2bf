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
"""
from __future__ import annotations

import hashlib
import time
from typing import TYPE_CHECKING, Any

from tools.processes.artifacts import ArtifactError
from tools.env import environment
from tools.guard.scan import Scan
from tools.processes.process import WorkerGone, WorkerProcess
from tools.record import Result, Verdict
from tools.sandbox import paths
from tools.judge.verdict import fail, passed

if TYPE_CHECKING:
    from tools.evaluate import Evaluator

Files = tuple[list[dict[str, Any]], bytes]
NO_FILES: Files = ([], b"")
ARTIFACT_REQUEST_S = 30.0


def toolchain(device: str) -> dict[str, Any]:
    """What a build product depends on besides its source."""
    env = environment(device)
    return {k: env.get(k) for k in ("device", "gpu", "capability", "cuda", "torch", "triton", "python")}


def executables(profile: str) -> list[Any]:
    return paths.executables(profile)


def _digest(source: str) -> str:
    return hashlib.sha256(source.encode()).hexdigest()


# the tools layer -----------------------------------------------------------------------------
def tools_layer(ev: "Evaluator") -> Files | None:
    if not ev.device.startswith("cuda"):
        return None
    return ev.artifacts.get(ev.artifacts.namespace("tools", "", ev.toolchain))


def publish_tools_layer(ev: "Evaluator", worker: WorkerProcess) -> None:
    """Once per cache: keep what a fresh worker compiled for itself (Triton's driver module and
    the evaluator's own kernels), asked before it is handed any candidate."""
    if not ev.device.startswith("cuda"):
        return
    namespace = ev.artifacts.namespace("tools", "", ev.toolchain)
    if ev.artifacts.published(namespace):
        return
    header, payload = worker.request({"op": "artifacts"}, ARTIFACT_REQUEST_S)
    if header.get("op") == "artifacts":
        try:
            ev.artifacts.put(namespace, header.get("files"), payload)
        except (ArtifactError, OSError):
            pass  # nothing kept: the next worker compiles them again


# CUDA C++ builds -----------------------------------------------------------------------------
def start(ev: "Evaluator", source: str) -> bool:
    """Start the build worker for a load_inline source (unless built, or building)."""
    digest = _digest(source)
    with ev._lock:
        if "load_inline" not in source or digest in ev._prebuilds:
            return False
        if ev.artifacts.published(ev.artifacts.namespace("cuda", digest, ev.toolchain)):
            return False
        proc = ev._spawn("candidate", "build")
        proc.max_reply_bytes = ev.reply_cap()
        proc.send({"op": "build", "source": source, "init": {"t": "list", "items": []}})
        ev._prebuilds[digest] = proc
        return True


def artifacts_for(ev: "Evaluator", source: str, scan: Scan, result: Result) -> Files | None:
    """The files to install in the candidate's worker before its build: the source's CUDA
    extensions (built now if need be) and Triton kernels from an earlier evaluation. None when
    the CUDA build failed (the verdict is set)."""
    digest = _digest(source)
    files: list[Files] = []
    triton = ev.artifacts.get(ev.artifacts.namespace("triton", digest, ev.toolchain))
    if triton:
        files.append(triton)
    if scan.uses_load_inline:
        built = _cuda(ev, source, digest, result)
        if built is None:
            return None
        files.append(built)
    return _merge(files)


def _cuda(ev: "Evaluator", source: str, digest: str, result: Result) -> Files | None:
    namespace = ev.artifacts.namespace("cuda", digest, ev.toolchain)
    found = ev.artifacts.get(namespace)
    if found is not None:
        return found
    start(ev, source)
    with ev._lock:
        proc = ev._prebuilds.pop(digest, None)
    if proc is None:  # another thread built it meanwhile
        return ev.artifacts.get(namespace) or NO_FILES
    t0 = time.monotonic()
    try:
        proc.wait_ready(ev.options.start_timeout)
        header, payload = proc.reply(ev.options.build_timeout)
    except WorkerGone as exc:
        fail(result, Verdict(exc.verdict), "build", f"the build step: {exc}")
        return None
    finally:
        proc.close()
        now = time.monotonic()
        result.phases["cuda_build"] = round(now - t0, 4)  # what this evaluation waited for the build
        result.phases["prebuild"] = round(now - proc.spawned_at, 4)  # the build worker's whole run
    if not ev.verdict_from_reply(header, "build", result):
        return None
    try:
        ev.artifacts.put(namespace, header.get("files"), payload)
    except (ArtifactError, OSError) as exc:
        fail(result, Verdict.REJECTED, "build", f"the build step handed over unusable files: {exc}")
        return None
    passed(result, "cuda-build", f"{len(header.get('files') or [])} extension(s) built in the build sandbox")
    return ev.artifacts.get(namespace) or NO_FILES


def _merge(parts: list[Files]) -> Files:
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
def reap(ev: "Evaluator", worker: WorkerProcess, source_hash: str, keep: bool) -> None:
    """Keep what the worker compiled for this source (when it ran), then kill it. Runs in a
    thread of its own, off the evaluation's critical path."""
    try:
        if keep and ev.device.startswith("cuda") and worker.alive():
            namespace = ev.artifacts.namespace("triton", source_hash, ev.toolchain)
            if not ev.artifacts.published(namespace):
                header, payload = worker.request({"op": "artifacts", "limit": ev.artifacts.namespace_cap_bytes},
                                                 ARTIFACT_REQUEST_S)
                if header.get("op") == "artifacts" and not header.get("truncated"):
                    files = [f for f in header.get("files") or [] if str(f.get("path", "")).startswith("triton/")]
                    ev.artifacts.put(namespace, files, payload)
    except (WorkerGone, ArtifactError, OSError):
        pass  # nothing kept: the next evaluation of this source compiles again
    finally:
        worker.kill()
