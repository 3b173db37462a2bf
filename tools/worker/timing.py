"""Where time is measured: the timed loop inside a worker (candidate or reference alike).

Protocol per timed call: inputs from a rotating pool of input sets (more bytes than L2, each
set made from its own seed and rewritten in place with new values between passes), L2 flushed
by writing twice its size, then start event, the call, end event, a device-wide synchronize,
and a third event. A 0.2 ms GPU busy-wait is queued before the start event, so the host's
launch overhead overlaps it: the sample is start -> end, the GPU time of the call on the
current stream, with no host launch or wake-up latency in it (host work beyond 0.2 ms per call
still shows, as it would in eager PyTorch). The gap from end to the third event exposes work left running on
another stream, which the parent rejects. The outputs of every timed call are handed to
the parent, which checks each one against the reference: doing less work while timed is a
correctness failure. The timing functions are bound when this module is imported, before any
candidate code runs, so a candidate that rebinds torch.cuda.Event cannot change what we read;
the sandbox's tripwires report such rebinding anyway.
"""
from __future__ import annotations

import time
from typing import Any

import torch

_Event = torch.cuda.Event
synchronize = torch.cuda.synchronize
_perf_counter = time.perf_counter
_elapsed = torch.cuda.Event.elapsed_time
_record = torch.cuda.Event.record
_sleep = torch.cuda._sleep

WARMUP_CALLS = 10
WARMUP_SECONDS = 0.1
PREROLL_MS = 0.2  # GPU busy-wait queued before the start event; the host launches meanwhile


class InputPool:
    """The reference worker's input sets, keyed by pool slot, each made from its seed.

    A slot's old set is let go before its new one is made, so that the pool never holds more
    than one set per slot (making the new set first, then copying it into the old buffers, held
    a third multi-GB set at the peak). Where a set lies does not matter here: the pool feeds the
    trusted eager model, and the candidate's copies of its sets, whose addresses the parent
    chooses (tools/processes/feed.py)."""

    def __init__(self, make_inputs) -> None:
        self.make_inputs = make_inputs  # seed -> list of inputs
        self.slots: dict[int, tuple[int, list[Any]]] = {}

    def get(self, slot: int, seed: int) -> list[Any]:
        held = self.slots.get(slot)
        if held is not None and held[0] == seed:
            return held[1]
        self.slots.pop(slot, None)
        del held
        fresh = self.make_inputs(seed)
        self.slots[slot] = (seed, fresh)
        return fresh

    def held_bytes(self) -> int:
        return sum(t.numel() * t.element_size() for _, inputs in self.slots.values() for t in _tensors(inputs))

    def clear(self) -> None:
        self.slots.clear()


def _tensors(value: Any) -> list[torch.Tensor]:
    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, (list, tuple)):
        return [t for v in value for t in _tensors(v)]
    return []


class Timer:
    def __init__(self, device: torch.device, l2_bytes: int) -> None:
        self.device = device
        # writing twice the L2 size evicts what the previous call left there
        self.flush = torch.empty(max(2 * l2_bytes, 1 << 20) // 4, dtype=torch.int32, device=device)
        self.preroll_cycles = self._calibrate()

    def _calibrate(self) -> int:
        """Clock cycles of _sleep that keep the GPU busy for about PREROLL_MS."""
        cycles = 1_000_000
        start, end = _Event(enable_timing=True), _Event(enable_timing=True)
        _sleep(cycles)  # first call loads the kernel
        synchronize(self.device)
        _record(start)
        _sleep(cycles)
        _record(end)
        end.synchronize()
        ms = max(float(_elapsed(start, end)), 1e-3)
        return int(cycles * PREROLL_MS / ms)

    def warm_up(self, fn, inputs: list[Any], min_seconds: float = WARMUP_SECONDS) -> int:
        """At least WARMUP_CALLS calls and `min_seconds` (the parent asks for less only for a
        reference already warmed in this process, right after the candidate's full warm-up)."""
        calls, start = 0, _perf_counter()
        while calls < WARMUP_CALLS or _perf_counter() - start < min_seconds:
            with torch.no_grad():
                fn(*inputs)
            synchronize(self.device)
            calls += 1
            if calls > 10_000:
                break
        return calls

    def time_call(self, fn, inputs: list[Any]) -> tuple[float, float, Any]:
        """One call on a cold L2: (ms to the end event on the current stream, ms to an event
        recorded after a device-wide synchronize, output). The first is the sample; the second
        tells whether work finished after the end event (on another stream): the parent
        compares its gap with the eager reference's, measured the same way in the same run."""
        self.flush.bitwise_xor_(1)
        start, end, after_sync = (_Event(enable_timing=True) for _ in range(3))
        synchronize(self.device)
        _sleep(self.preroll_cycles)  # the call's launch overhead (Python, launcher) overlaps this
        _record(start)
        with torch.no_grad():
            out = fn(*inputs)
        _record(end)
        synchronize(self.device)  # device-wide: waits for work on every stream
        _record(after_sync)
        after_sync.synchronize()
        return float(_elapsed(start, end)), float(_elapsed(start, after_sync)), out
