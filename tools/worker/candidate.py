"""The candidate worker: a ModelNew built from untrusted source, in a process confined by the
operating system (tools/sandbox/), which must be assumed to be the candidate's own.

It never runs the problem's file and never sees a seed: the constructor's arguments come from
the reference worker, and every input set is written into this process's input arena by the
parent just before the request that uses it (on the CPU, inside the request). Before the
candidate's source is imported, the Python-level hooks (tools/worker/hooks.py) are armed as a
first, cheap filter; what decides is outside this process.
"""
from __future__ import annotations

import hashlib
import inspect
import os
import secrets
import time
from pathlib import Path
from typing import Any

from tools.worker.errors import Failure, describe_exception, load_module
from tools.worker.worker import Reply, Worker, construct, prewarm

ARTIFACT_DIRS = ("cuda", "triton")  # what a build leaves for the next worker (see roots())


class CandidateWorker(Worker):
    role = "candidate"

    def __init__(self, config: dict[str, Any]) -> None:
        super().__init__(config)
        from tools.worker.hooks import Sandbox, toolchain_dirs

        self.scratch = Path(config["scratch"])
        self.build_only = config.get("profile") == "build"
        self.hooks = Sandbox(scratch=self.scratch, writable=[Path(p) for p in config["writable"]],
                             hidden=[Path(p) for p in config.get("hidden", [])], toolchains=toolchain_dirs(),
                             executables=tuple(config.get("executables", ())), own_sockets=(config["memory_fd"],))
        self.input_arena: Any = None  # where the parent writes this worker's inputs (CUDA)
        self.builder: Any = None
        self.cls: Any = None
        self.variant_model: Any = None  # ModelNew built with a held-out variant's arguments
        if not self.build_only:
            prewarm(self.device)

    def handlers(self):
        return {"install": self.install, "build": self.build, "variant": self.variant, "input_arena": self.grow_input_arena, "gate": self.make_gate,
                "trial": self.trial, "time": self.time, "profile": self.profile, "counters": self.counters,
                "artifacts": self.artifacts}

    def violations(self) -> list[str]:
        return self.hooks.check() if self.hooks.armed else []

    # build --------------------------------------------------------------------------------
    def install(self, msg: dict[str, Any], payload: bytes) -> Reply:
        """Files a previous build of this source left (published by the parent): CUDA
        extensions and Triton's compiled kernels, written below the scratch directory."""
        install_files(roots(self.config), msg["files"], payload)
        return {"op": "installed", "installed": len(msg["files"])}, b""

    def build(self, msg: dict[str, Any], payload: bytes) -> Reply:
        """Import the candidate and construct ModelNew with the reference's constructor arguments."""
        import torch

        from tools.wire.transport import decode

        start = time.monotonic()
        try:
            cls = self._import(msg["source"])
        except Exception as exc:  # noqa: BLE001 - a module that does not load did not build
            kind, message = describe_exception(exc, self.source_name)
            raise Failure("compile_error" if kind == "runtime_error" else kind, message) from None
        cuda = {"seconds": self.builder.seconds, "built": self.builder.built, "cached": self.builder.cached}
        if self.build_only:  # a build step: importing ran load_inline; hand over what it built
            reply, files = pack_files(roots(self.config), self.builder.artifacts)
            return {"op": "built", "seconds": time.monotonic() - start, "cuda": cuda, **reply}, files
        init_inputs = decode(msg["init"], payload)
        try:
            inspect.signature(cls).bind(*init_inputs)
        except TypeError as exc:
            raise Failure("compile_error", f"{cls.__name__}(*get_init_inputs()) does not fit its constructor: {exc}") from None
        self.model = construct(cls, init_inputs, self.config["init_seed"], self.device, self.dtype)  # public seed: weights match
        self.cls = cls
        return {"op": "built", "seconds": time.monotonic() - start, "cuda": cuda}, b""

    def variant(self, msg: dict[str, Any], payload: bytes) -> Reply:
        """ModelNew again, with a held-out variant's constructor arguments (tools/judge/heldout.py)."""
        import torch

        from tools.wire.transport import decode

        if self.cls is None:
            raise Failure("runtime_error", "no model was built")
        self.variant_model = None
        init_inputs = decode(msg["init"], payload)
        self.variant_model = construct(self.cls, init_inputs, self.config["init_seed"], self.device, self.dtype)
        return {"op": "built", "seconds": 0.0}, b""

    def _import(self, source: str):
        import torch.utils.cpp_extension as cpp_extension

        from tools.worker.cuda_build import CudaBuilder

        digest = hashlib.sha256(source.encode()).hexdigest()[:16]
        self.source_name = f"candidate_{digest}.py"
        path = self.scratch / self.source_name
        path.write_text(source)
        self.builder = CudaBuilder(self.scratch / "cuda", self.launches.wrap_extension, build=self.build_only)
        cpp_extension.load_inline = self.builder.load_inline
        self.launches.module_name = f"ratchet_candidate_{digest}"
        self.hooks.arm()
        module = load_module(path, self.launches.module_name)
        cls = getattr(module, "ModelNew", None)
        if not isinstance(cls, type):
            raise Failure("compile_error", "the candidate defines no class ModelNew")
        return cls

    # inputs -------------------------------------------------------------------------------
    def grow_input_arena(self, msg: dict[str, Any], payload: bytes) -> Reply:
        """A buffer of at least msg["bytes"] for the parent to write input sets into."""
        from tools.wire.transport import Arena

        self.input_arena = None  # the parent asks only when it needs more room
        self.input_arena = Arena(self.device, int(msg["bytes"]))
        self.outgoing.append(self.input_arena.fd)
        return {"op": "input_arena", "arena": self.input_arena.descriptor}, b""

    def _inputs(self, tree: dict[str, Any], payload: bytes) -> Any:
        from tools.wire.transport import decode

        return decode(tree, payload, self.input_arena.buf if self.input_arena is not None else None)

    # requests -----------------------------------------------------------------------------
    def trial(self, msg: dict[str, Any], payload: bytes) -> Reply:
        import torch

        from tools.worker.instrument import OpRecorder

        model = self.variant_model if msg.get("model") == "variant" else self.model
        if model is None:
            raise Failure("runtime_error", "no model was built")
        inputs = self._inputs(msg["inputs"], payload)
        try:
            inspect.signature(model.forward).bind(*inputs)
        except TypeError as exc:
            raise Failure("compile_error", f"forward(*get_inputs()) does not fit the signature of forward: {exc}") from None
        torch.manual_seed(secrets.randbits(63))  # the global RNG tells nothing about the inputs
        recorder = OpRecorder()
        self.launches.reset()
        with recorder:
            outputs, seconds = self.forward(inputs, poison=bool(msg.get("poison")), model=model)
        reply = {"op": "outputs", "seconds": seconds, "launches": self.launches.count,
                 "kernels": dict(self.launches.names), "ops": dict(recorder.ops)}
        if self.device.type != "cuda":  # the inputs came in the request; they go back in the reply
            return self.reply_with(reply, [outputs, inputs], int(msg.get("arena_cap") or 0))
        # on a GPU the parent reads the inputs after forward() in the input arena, where it wrote
        # them: only the outputs are copied out (a copy of the inputs would take a whole set more)
        from tools.wire.transport import encode

        tree, payload, arena = self.encode(outputs, int(msg.get("arena_cap") or 0))
        reply["tree"] = {"t": "list", "items": [tree, encode(inputs, hold=True)[0]]}
        if arena:
            reply["arena"] = arena
        return reply, payload

    def time(self, msg: dict[str, Any], payload: bytes) -> Reply:
        """Timed calls on the input sets the parent wrote for this block."""
        warmup = self._inputs(msg["warmup"], payload) if msg.get("warmup") is not None else None
        sets = [self._inputs(tree, payload) for tree in msg["calls"]]
        return self.timed_calls(self.model, "model", warmup, sets, msg)

    def profile(self, msg: dict[str, Any], payload: bytes) -> Reply:
        """GPU time per kernel name in one forward, and the share in the candidate's own kernels."""
        from tools.worker.profile import kernel_times

        times = kernel_times(self.model, self._inputs(msg["inputs"], payload), self.device)
        own_names = [n for n in msg.get("own", []) if n]
        own = sum(t for name, t in times.items() if any(k in name for k in own_names))
        total = sum(times.values())
        return {"op": "profiled", "kernels_us": times, "own_share": (own / total) if total else None}, b""

    def counters(self, msg: dict[str, Any], payload: bytes) -> Reply:
        """One forward inside the CUDA profiler's range, for Nsight Compute around this worker."""
        from tools.worker.profile import counted_forward

        counted_forward(self.model, self._inputs(msg["inputs"], payload), self.device)
        return {"op": "counted"}, b""

    def artifacts(self, msg: dict[str, Any], payload: bytes) -> Reply:
        """What this worker compiled (Triton's cache, built extensions), for the parent to keep
        for the next evaluation of the same source."""
        files = [p for d in roots(self.config).values() for p in sorted(d.rglob("*")) if p.is_file()]
        reply, blob = pack_files(roots(self.config), files, limit=int(msg.get("limit") or 0))
        return {"op": "artifacts", **reply}, blob


def roots(config: dict[str, Any]) -> dict[str, Path]:
    """Where build products live: CUDA extensions below the scratch directory; Triton's cache at
    the path the parent chose (the same in every sandbox, as Triton's cache records absolute paths)."""
    scratch = Path(config["scratch"])
    return {"cuda": scratch / "cuda", "triton": Path(config.get("triton_cache") or scratch / "triton")}


def install_files(where: dict[str, Path], manifest: list[dict[str, Any]], payload: bytes) -> None:
    """Write kept build products into place. A file already there is left alone: it is the same
    product (its name is its cache key), and this process may have it mapped (a loaded Triton
    launcher or driver module), which rewriting in place would corrupt under it."""
    for entry in manifest:
        target = safe_target(where, entry["path"])
        if target.exists():
            continue
        target.parent.mkdir(parents=True, exist_ok=True)
        start, length = int(entry["offset"]), int(entry["length"])
        staging = target.with_name(f".{target.name}.installing")
        staging.write_bytes(payload[start:start + length])
        os.replace(staging, target)


def pack_files(where: dict[str, Path], files: list[Path], limit: int = 0) -> tuple[dict[str, Any], bytes]:
    """Files below the roots as a manifest [{"path": "<root>/<relative>", "offset", "length"}] and one payload."""
    manifest: list[dict[str, Any]] = []
    chunks: list[bytes] = []
    offset = 0
    for path in files:
        name = next((n for n, root in where.items() if root in path.parents), None)
        if name is None:
            continue
        data = path.read_bytes()
        if limit and offset + len(data) > limit:
            return {"files": manifest, "truncated": True}, b"".join(chunks)
        manifest.append({"path": f"{name}/{path.relative_to(where[name])}", "offset": offset, "length": len(data)})
        chunks.append(data)
        offset += len(data)
    return {"files": manifest}, b"".join(chunks)


def safe_target(where: dict[str, Path], relative: str) -> Path:
    parts = Path(relative).parts
    if len(parts) < 2 or parts[0] not in where or any(p in ("", ".", "..") or os.sep in p for p in parts):
        raise Failure("runtime_error", f"refusing to install {relative!r}")
    return where[parts[0]].joinpath(*parts[1:])
