"""The worker: one model per process, answering the parent's requests (tools/worker/__main__.py).

One worker holds one model. The reference role builds the problem's Model; the candidate role
builds a ModelNew from untrusted source, after arming the sandbox. Both answer the same
requests (trial, time) with the same code, so inputs are generated identically on both
sides from the secret seed, on the device, after the candidate is built. The worker only
reports what happened; the parent compares outputs and decides the verdict.
"""
from __future__ import annotations

import contextlib
import hashlib
import inspect
import os
import time
from pathlib import Path
from typing import Any

from tools.worker.errors import Failure, describe_exception, load_module


class Worker:
    def __init__(self, config: dict[str, Any]) -> None:
        import torch
        import torch._dynamo  # noqa: F401 - imported lazily by torch otherwise, mid-trial, where it
        # rebinds torch.manual_seed and would trip the tripwires; loading it here also keeps it
        # off the critical path of a warm worker

        from tools.worker.instrument import LaunchCounter
        from tools.worker.hooks import Sandbox, isolate_network

        self.config = config
        self.network = isolate_network() if config["role"] == "candidate" else "n/a"
        self.device = torch.device(config["device"])
        if self.device.type == "cuda":
            torch.cuda.set_device(self.device)
            torch.empty(1, device=self.device)  # create the context now, not inside a trial
            if config.get("gpu_memory_fraction"):
                torch.cuda.set_per_process_memory_fraction(config["gpu_memory_fraction"], self.device)
        self.problem = load_module(Path(config["problem"]), "ratchet_problem")
        self.get_inputs = getattr(self.problem, "get_inputs", None)
        self.get_init_inputs = getattr(self.problem, "get_init_inputs", lambda: [])
        self.launches = LaunchCounter()
        self.launches.install_triton()
        self.sandbox = Sandbox(
            scratch=Path(config["scratch"]),
            writable=[Path(p).resolve() for p in config["writable"]],
            hidden=[Path(p).resolve() for p in config["hidden"]],
            toolchains=toolchain_dirs(),
        )
        if config["role"] == "candidate":
            prewarm(self.device)
        self.model: Any = None
        self.source_name: str | None = None
        self.arena: Any = None  # the exchange buffer for CUDA outputs (tools.transport.Arena)
        self.timer: Any = None
        self.pool: Any = None
        self.compiled: Any = None
        self.warmed: set[str] = set()  # functions given the full timing warm-up in this process

    # requests ---------------------------------------------------------------------------
    def build(self, msg: dict[str, Any]) -> dict[str, Any]:
        """Build the model: the problem's Model (reference) or ModelNew from source (candidate)."""
        import torch

        from tools.worker.inputs import call_factory

        start = time.monotonic()
        role = self.config["role"]
        init_inputs = call_factory(self.get_init_inputs, "get_init_inputs", None)
        if role == "reference":
            cls = getattr(self.problem, self.config["entry"])
        else:
            try:
                cls = self._import_candidate(msg["source"])
            except Exception as exc:  # noqa: BLE001 - a module that does not load did not build
                kind, message = describe_exception(exc, self.source_name)
                raise Failure("compile_error" if kind == "runtime_error" else kind, message) from None
        if self.config.get("build_only"):  # a prebuild: importing ran load_inline, into the cache
            return {"op": "built", "seconds": time.monotonic() - start,
                    "cuda": {"seconds": self.builder.seconds, "built": self.builder.built, "cached": self.builder.cached}}
        try:
            inspect.signature(cls).bind(*init_inputs)
        except TypeError as exc:
            raise Failure("compile_error", f"{cls.__name__}(*get_init_inputs()) does not fit its constructor: {exc}") from None
        torch.manual_seed(self.config["init_seed"])
        self.model = cls(*init_inputs).to(self.device)
        info: dict[str, Any] = {"op": "built", "seconds": time.monotonic() - start}
        if role == "reference":
            info["problem"] = self._describe()
        else:
            info["cuda"] = {"seconds": self.builder.seconds, "built": self.builder.built, "cached": self.builder.cached}
        return info

    def _import_candidate(self, source: str):
        import torch.utils.cpp_extension as cpp_extension

        from tools.worker.cuda_build import CudaBuilder

        digest = hashlib.sha256(source.encode()).hexdigest()[:16]
        self.source_name = f"candidate_{digest}.py"
        path = Path(self.config["scratch"]) / self.source_name
        path.write_text(source)
        self.builder = CudaBuilder(Path(self.config["cuda_cache"]), self.launches.wrap_extension)
        cpp_extension.load_inline = self.builder.load_inline
        self.launches.module_name = f"ratchet_candidate_{digest}"
        os.environ["TRITON_CACHE_DIR"] = str(Path(self.config["triton_cache"]) / digest)
        self.sandbox.arm()
        module = load_module(path, self.launches.module_name)
        cls = getattr(module, "ModelNew", None)
        if not isinstance(cls, type):
            raise Failure("compile_error", "the candidate defines no class ModelNew")
        return cls

    def trial(self, msg: dict[str, Any]) -> tuple[dict[str, Any], bytes]:
        import torch

        from tools.worker.inputs import generate
        from tools.worker.instrument import OpRecorder
        from tools.worker.timing import synchronize
        if self.model is None:
            raise Failure("runtime_error", "no model was built")
        inputs = generate(self.get_inputs, int(msg["seed"]), msg["distribution"], self.device)
        try:
            inspect.signature(self.model.forward).bind(*inputs)
        except TypeError as exc:
            raise Failure("compile_error", f"forward(*get_inputs()) does not fit the signature of forward: {exc}") from None
        recorder = OpRecorder() if msg.get("record") else contextlib.nullcontext()
        self.launches.reset()
        start = time.monotonic()
        with poisoned_memory(bool(msg.get("poison"))), torch.no_grad(), recorder:
            outputs = self.model(*inputs)
        if self.device.type == "cuda":
            synchronize(self.device)  # bound before the candidate loaded: it cannot be rebound
        seconds = time.monotonic() - start
        tree, payload, arena = self.encode([outputs, inputs], int(msg.get("arena_cap") or 0))
        reply = {
            "op": "outputs", "tree": tree, "seconds": seconds, "launches": self.launches.count,
            "kernels": dict(self.launches.names),
            "ops": dict(recorder.ops) if isinstance(recorder, OpRecorder) else None,
        }
        if arena:
            reply["arena"] = arena
        return reply, payload

    def encode(self, value: Any, cap: int) -> tuple[dict[str, Any], bytes, dict[str, Any] | None]:
        """Encode a reply's tensors; on a GPU into the arena, grown (up to `cap` bytes) when
        needed. Returns the new arena's descriptor when there is one, for the parent to map."""
        from tools.worker.timing import synchronize
        from tools.transport import Arena, encode, needed_bytes

        if self.device.type != "cuda":
            return (*encode(value), None)
        fresh = None
        need = min(needed_bytes(value), max(cap, 1 << 20))
        if self.arena is None or self.arena.buf.numel() < need:
            self.arena = None  # the old one may stay mapped by the parent; this worker is short-lived
            self.arena = Arena(self.device, need)
            fresh = self.arena.descriptor
        tree, payload = encode(value, self.arena)
        synchronize(self.device)  # the copies are done before the parent reads them
        return tree, payload, fresh

    def time(self, msg: dict[str, Any]) -> tuple[dict[str, Any], bytes]:
        """Timed calls on pool slots [(slot, seed), ...]; outputs handed over when asked."""
        import torch

        from tools.worker.inputs import generate
        from tools.worker.timing import WARMUP_SECONDS, InputPool, Timer

        if self.timer is None:
            l2 = torch.cuda.get_device_properties(self.device).L2_cache_size
            self.timer = Timer(self.device, l2)
            self.pool = InputPool(lambda seed: generate(self.get_inputs, seed, "problem", self.device))
        key = msg.get("fn") or "model"
        fn = self._compiled() if key == "compiled" else self.model
        warm = 0
        if msg.get("warmup_seed") is not None:
            # the long-lived reference worker warms a function fully once; later evaluations
            # take the minimum call count, right after the candidate's own full warm-up
            warm = self.timer.warm_up(fn, generate(self.get_inputs, int(msg["warmup_seed"]), "problem", self.device),
                                      min_seconds=0.0 if key in self.warmed else WARMUP_SECONDS)
            self.warmed.add(key)
        samples, synced, outputs = [], [], []
        for slot, seed in msg["calls"]:
            inputs = self.pool.get(int(slot), int(seed))
            if msg.get("untimed"):  # outputs only: the reference for timed candidate calls
                with torch.no_grad():
                    out = fn(*inputs)
            else:
                ms, ms_synced, out = self.timer.time_call(fn, inputs)
                samples.append(ms)
                synced.append(ms_synced)
            if msg.get("keep_outputs"):
                outputs.append(out)
        reply: dict[str, Any] = {"op": "timed", "samples": samples, "synced": synced, "warmup_calls": warm}
        payload = b""
        if msg.get("keep_outputs"):
            reply["tree"], payload, arena = self.encode(outputs, int(msg.get("arena_cap") or 0))
            if arena:
                reply["arena"] = arena
        return reply, payload

    def _compiled(self):
        import torch

        if self.compiled is None:
            self.compiled = torch.compile(self.model)  # default mode: the baseline users know
        return self.compiled

    def ceilings(self) -> dict[str, Any]:
        from tools.roofline import measure_ceilings

        return {"op": "ceilings", "ceilings": measure_ceilings(self.device).to_dict()}

    def profile(self, msg: dict[str, Any]) -> dict[str, Any]:
        """GPU time per kernel name in one forward, and the share in the candidate's own kernels."""
        import torch
        from torch.profiler import ProfilerActivity, profile

        from tools.worker.inputs import generate

        inputs = generate(self.get_inputs, int(msg["seed"]), "problem", self.device)
        with torch.no_grad():
            self.model(*inputs)  # compiled and warm before the profiled call
        torch.cuda.synchronize(self.device)
        with profile(activities=[ProfilerActivity.CUDA]) as prof, torch.no_grad():
            self.model(*inputs)
            torch.cuda.synchronize(self.device)
        times: dict[str, float] = {}
        for event in prof.events():
            if event.device_type == torch.autograd.DeviceType.CUDA:
                times[event.name] = times.get(event.name, 0.0) + event.device_time_total
        own_names = [n for n in msg.get("own", []) if n]
        own = sum(t for name, t in times.items() if any(k in name for k in own_names))
        total = sum(times.values())
        return {"op": "profiled", "kernels_us": times, "own_share": (own / total) if total else None}


    def _describe(self) -> dict[str, Any]:
        """What the parent needs to know about the problem: inputs, outputs, ops."""
        import torch

        from tools.worker.inputs import describe, generate, tensor_bytes
        from tools.worker.instrument import OpRecorder

        inputs = generate(self.get_inputs, self.config["probe_seed"], "problem", self.device)
        with torch.no_grad(), OpRecorder() as rec:
            outputs = self.model(*inputs)
        outs = list(outputs) if isinstance(outputs, (tuple, list)) else [outputs]
        params = [t for t in list(self.model.parameters()) + list(self.model.buffers())]
        from tools.roofline import count_flops, dtype_key, problem_dtype

        flops = count_flops(self.model, inputs)
        tensors = [t for t in [*inputs, *outs, *params] if isinstance(t, torch.Tensor)]
        return {
            "inputs": describe(inputs),
            "outputs": describe(outs),
            "init_args": describe(list(self.get_init_inputs())),
            "ops": dict(rec.ops),
            "input_bytes": tensor_bytes(inputs),
            "output_bytes": tensor_bytes(outs),
            "param_bytes": tensor_bytes(params),
            "flops": flops,
            "dtype": dtype_key(problem_dtype(tensors)),
        }


def prewarm(device: Any) -> None:
    """Pay a candidate worker's one-time costs before it is handed a candidate (spare workers
    start ahead of need): the C++ extension machinery that load_inline needs, and on a GPU,
    Triton's driver and launcher set-up, by launching one of the evaluator's own kernels."""
    import torch
    import torch.utils.cpp_extension  # noqa: F401 - ~0.1 s of imports (setuptools) otherwise paid in build

    import tools.worker.cuda_build  # noqa: F401
    import tools.worker.inputs  # noqa: F401
    import tools.worker.timing  # noqa: F401
    import tools.transport  # noqa: F401

    if device.type == "cuda":
        from tools.compare import Tolerance
        from tools.compare_gpu import float_summary

        x = torch.ones(16, device=device)
        float_summary(x, x, Tolerance(atol=0.0, rtol=0.0, norm_rtol=0.0))


@contextlib.contextmanager
def poisoned_memory(on: bool):
    """Fill uninitialized memory (torch.empty and friends) with NaN / max-int while active, so
    output elements a kernel never writes cannot pass as correct."""
    import torch

    if not on:
        yield
        return
    previous = (torch.are_deterministic_algorithms_enabled(), torch.is_deterministic_algorithms_warn_only_enabled(),
                torch.utils.deterministic.fill_uninitialized_memory)
    torch.use_deterministic_algorithms(True, warn_only=True)
    torch.utils.deterministic.fill_uninitialized_memory = True
    try:
        yield
    finally:
        torch.use_deterministic_algorithms(previous[0], warn_only=previous[1])
        torch.utils.deterministic.fill_uninitialized_memory = previous[2]


def toolchain_dirs() -> tuple[str, ...]:
    import torch
    import triton

    return (str(Path(triton.__file__).parent), str(Path(torch.__file__).parent))
