"""What both kinds of worker share: the device, the count of the candidate's own kernel launches,
the exchange arena that hands CUDA outputs to the parent, and the timed loop.

One worker holds one model. tools/worker/reference.py holds the problem's Model (trusted code:
the user's own file) and is the only process that knows the secret seeds: it makes every input.
tools/worker/candidate.py holds a ModelNew built from untrusted source, in a process confined by
the operating system; it is handed its inputs and never sees a seed. A worker only reports what
happened; the parent compares outputs and decides the verdict.
"""
from __future__ import annotations

import contextlib
import time
from typing import Any, Callable

Reply = tuple[dict[str, Any], bytes]


def construct(cls: Any, init_inputs: list[Any], seed: int, device: Any, dtype: Any = None) -> Any:
    """`cls(*init_inputs)` after torch.manual_seed(seed), its tensors made on `device` from the
    start, and its floating parameters and buffers cast to `dtype` when given (a half-precision
    run, tools/worker/precision.py). Both workers build their model so, so the weights match. Made
    on the CPU and then copied, a Linear(32768, 32768)'s initialization took 8.5 s on an H100
    machine's CPUs (KernelBench's L2_59, every evaluation), against 0.02 s on the card
    (docs/evaluator.md)."""
    import torch

    torch.manual_seed(seed)
    with torch.device(device):
        model = cls(*init_inputs)
    return model.to(device) if dtype is None else model.to(device=device, dtype=dtype)


class Worker:
    role = ""

    def __init__(self, config: dict[str, Any]) -> None:
        boot = config.setdefault("boot", {})  # start-up steps (tools/worker/__main__.py)
        import torch

        boot["torch"] = time.monotonic()
        import torch._dynamo  # noqa: F401 - imported lazily by torch otherwise, mid-trial, where it
        # rebinds torch.manual_seed and would trip the tripwires; loading it here also keeps it
        # off the critical path of a warm worker

        boot["dynamo"] = time.monotonic()
        from tools.worker.instrument import LaunchCounter

        self.config = config
        self.device = torch.device(config["device"])
        if self.device.type == "cuda":
            torch.cuda.set_device(self.device)
            torch.empty(1, device=self.device)  # create the context now, not inside a trial
            if config.get("gpu_memory_fraction"):
                torch.cuda.set_per_process_memory_fraction(config["gpu_memory_fraction"], self.device)
        from tools.worker.precision import apply, half_dtype

        apply(config.get("precision", "fp32"))  # before any model exists (the candidate's tripwires read it)
        self.dtype = half_dtype(config.get("precision", "fp32"))  # models and inputs cast to it, or None
        boot["context"] = time.monotonic()
        self.launches = LaunchCounter()
        self.launches.install_triton()
        boot["triton"] = time.monotonic()
        if self.device.type == "cpu":
            interpret_autotune()
        self.model: Any = None
        self.source_name: str | None = None
        self.arena: Any = None  # the exchange buffer for CUDA outputs (tools.wire.transport.Arena)
        self.arena_floor = 0  # bytes the arena is made with at least (the reference's: its trial's reply)
        self.outgoing: list[int] = []  # memory handles (fds) to send the parent before the next reply
        self.timer: Any = None
        self.warmed: set[str] = set()  # functions given the full timing warm-up in this process
        self.gate: Any = None  # two words the parent's stream and this worker's signal through (tools/wire/stream_ops.py)

    def handlers(self) -> dict[str, Callable[[dict[str, Any], bytes], Reply]]:
        raise NotImplementedError

    def violations(self) -> list[str]:
        return []

    def make_gate(self, msg: dict[str, Any], payload: bytes) -> Reply:
        """A small allocation shared with the parent for its timed passes (tools/timing/gate.py):
        zeroed, then exported like an arena."""
        from tools.wire.stream_ops import GATE_BYTES
        from tools.wire.transport import Arena
        from tools.worker.timing import synchronize

        if self.device.type != "cuda":
            return {"op": "error", "kind": "error", "message": "a gate needs a GPU"}, b""
        self.gate = None
        self.gate = Arena(self.device, GATE_BYTES)
        self.gate.buf.zero_()
        synchronize(self.device)
        self.outgoing.append(self.gate.fd)
        return {"op": "gate", "arena": self.gate.descriptor}, b""

    def encode(self, value: Any, cap: int, sync: bool = True) -> tuple[dict[str, Any], bytes, dict[str, Any] | None]:
        """Encode a reply's tensors; on a GPU into the arena, grown (up to `cap` bytes) when
        needed. Returns the new arena's descriptor when there is one, for the parent to map.
        Without `sync`, the copies may still be running when this returns (a gated pass: the
        parent's stream waits for them on the GPU)."""
        from tools.wire.transport import Arena, encode, needed_bytes
        from tools.worker.timing import synchronize

        if self.device.type != "cuda":
            return (*encode(value), None)
        fresh = None
        # a smaller arena replaced by a larger one is held twice until the parent maps the new
        # one: the floor makes the first one large enough for every reply of a multi-GB problem
        need = max(min(needed_bytes(value), max(cap, 1 << 20)), self.arena_floor)
        if self.arena is None or self.arena.buf.numel() < need:
            self.arena = None  # the old one may stay mapped by the parent; this worker is short-lived
            self.arena = Arena(self.device, need)
            self.outgoing.append(self.arena.fd)
            fresh = self.arena.descriptor
        tree, payload = encode(value, self.arena)
        if sync:
            synchronize(self.device)  # the copies are done before the parent reads them
        return tree, payload, fresh

    def reply_with(self, reply: dict[str, Any], value: Any, cap: int, sync: bool = True) -> Reply:
        reply["tree"], payload, arena = self.encode(value, cap, sync)
        if arena:
            reply["arena"] = arena
        return reply, payload

    def timed_calls(self, fn: Callable[..., Any], key: str, warmup: list[Any] | None, input_sets: list[list[Any]],
                    msg: dict[str, Any]) -> Reply:
        """The timed loop over `input_sets` (one call each), after a warm-up on `warmup` when
        given; outputs handed over when asked (`keep_outputs`), samples always."""
        import torch

        from tools.worker.timing import WARMUP_SECONDS, Timer

        if self.timer is None:
            l2 = torch.cuda.get_device_properties(self.device).L2_cache_size
            self.timer = Timer(self.device, l2)
        warm = 0
        if warmup is not None:
            # the long-lived reference worker warms a function fully once; later evaluations
            # take the minimum call count, right after the candidate's own full warm-up
            warm = self.timer.warm_up(fn, warmup, min_seconds=0.0 if key in self.warmed else WARMUP_SECONDS)
            self.warmed.add(key)
        if msg.get("burst"):  # back to back, no events: the parent's own clock times this request
            return self.burst(fn, input_sets, int(msg.get("arena_cap") or 0), msg.get("gate"))
        samples, synced, outputs = [], [], []
        for inputs in input_sets:
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
        if msg.get("keep_outputs"):
            return self.reply_with(reply, outputs, int(msg.get("arena_cap") or 0))
        return reply, b""

    def burst(self, fn: Callable[..., Any], input_sets: list[list[Any]], arena_cap: int, gate: Any = None) -> Reply:
        """One call per input set, back to back on the current stream; every output handed over
        for checking. Nothing in the reply is a time. Plain: between two device-wide
        synchronizations. Gated (`gate`, the pass number, tools/timing/gate.py): the calls and
        the hand-over are queued behind a wait for the parent's GATE word and followed by a write
        of DONE, and the reply goes out without waiting for the GPU, so that the parent's stream,
        not this process, sees when the work began and ended."""
        import torch

        from tools.worker.timing import synchronize

        synchronize(self.device)
        if gate is None:
            with torch.no_grad():
                outputs = [fn(*inputs) for inputs in input_sets]
            synchronize(self.device)
            return self.reply_with({"op": "burst", "calls": len(outputs)}, outputs, arena_cap)
        from tools.wire.stream_ops import DONE_OFFSET, GATE_OFFSET, wait_value, write_value

        if self.gate is None:
            return {"op": "error", "kind": "error", "message": "a gated pass before the gate was made"}, b""
        stream = torch.cuda.current_stream(self.device)
        base = self.gate.buf.data_ptr()
        wait_value(stream, base + GATE_OFFSET, int(gate))
        with torch.no_grad():
            outputs = [fn(*inputs) for inputs in input_sets]
        reply = self.reply_with({"op": "burst", "calls": len(outputs)}, outputs, arena_cap, sync=False)
        write_value(stream, base + DONE_OFFSET, int(gate))
        return reply

    def forward(self, inputs: list[Any], poison: bool, model: Any = None) -> tuple[Any, float]:
        """One forward pass of `model` (default: the worker's model; no grad; uninitialized
        memory poisoned when asked), synchronized."""
        import torch

        from tools.worker.timing import synchronize

        start = time.monotonic()
        with poisoned_memory(poison), torch.no_grad():
            outputs = (model if model is not None else self.model)(*inputs)
        if self.device.type == "cuda":
            synchronize(self.device)  # bound before the candidate loaded: it cannot be rebound
        return outputs, time.monotonic() - start


def prewarm(device: Any) -> None:
    """Pay a candidate worker's one-time costs before it is handed a candidate (spare workers
    start ahead of need): the C++ extension machinery that load_inline needs, and on a GPU,
    Triton's driver and launcher set-up, by launching one of the evaluator's own kernels."""
    import torch
    import torch.utils.cpp_extension  # noqa: F401 - ~0.1 s of imports (setuptools) otherwise paid in build

    import tools.wire.transport  # noqa: F401
    import tools.worker.cuda_build  # noqa: F401
    import tools.worker.timing  # noqa: F401

    if device.type == "cuda":  # a kernel of the worker's own: the parent's judging code stays out of here
        from tools.worker import warmup
        from tools.worker.profile import kernel_times

        warmup.launch(device)
        # the profiler's one-time start (CUPTI, kineto: about 0.3 s) paid here, ahead of need, not in
        # the evaluation's profile step (tools/timing/library.py), where it was most of the step
        kernel_times(lambda: warmup.launch(device), [], device)


def interpret_autotune() -> None:
    """On the CPU (TRITON_INTERPRET=1) there is no GPU driver, and @triton.autotune benchmarks its
    configs with driver.active.get_benchmarker(), which fails with "0 active drivers". Time nothing
    there: run every config once (a config that fails, fails here as it would when tuned on a GPU)
    and keep the first. Set before the candidate is imported and the hooks armed."""
    from triton.runtime.autotuner import Autotuner

    def run_once(kernel_call: Any, quantiles: Any = None) -> list[float]:
        kernel_call()
        return [0.0, 0.0, 0.0]

    Autotuner.do_bench = property(lambda self: self._do_bench or run_once)


@contextlib.contextmanager
def poisoned_memory(on: bool):
    """Fill uninitialized memory (torch.empty and friends) with NaN / max-int while active, so
    output elements a kernel never writes cannot pass as correct."""
    import torch

    if not on:
        yield
        return
    previous = (torch.are_deterministic_algorithms_enabled(), torch.is_deterministic_algorithms_warn_only_enabled(),
                torch.utils.deterministic.fill_uninitialized_memory)  # type: ignore[attr-defined]
    torch.use_deterministic_algorithms(True, warn_only=True)
    torch.utils.deterministic.fill_uninitialized_memory = True  # type: ignore[attr-defined]
    try:
        yield
    finally:
        torch.use_deterministic_algorithms(previous[0], warn_only=previous[1])
        torch.utils.deterministic.fill_uninitialized_memory = previous[2]  # type: ignore[attr-defined]
