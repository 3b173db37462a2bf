"""The parent's GPU clock over a pass of a worker's calls (the second clock, tools/timing/clocks.py).

A candidate owns its process, so nothing timed there can be trusted; the parent cannot put events
on another process's stream either. It can order its own stream against the worker's on the GPU,
through two words of memory both map (tools/wire/stream_ops.py). A pass of k calls:

    parent's stream:  busy-wait | L2 flush | start | copy the inputs in | gate open: GATE = n |
                      wait DONE >= n | done | copy the outputs out | end
    worker's stream:  wait GATE >= n | k calls | hand the outputs over | DONE = n

The parent queues its side and sends the request; the worker queues its side behind the wait and
answers without waiting for the GPU. The busy-wait is long enough that the worker has queued
everything before the gate opens (checked: the reply must come while the parent's stream is
still short of the gate; otherwise the pass is run again with a wait twice as long), so neither
the request's round trip nor the worker's host work is on the clock, and the GPU runs the calls
back to back. The clock is the parent's own events, from `start` to `end`, less the two copies
(charged at most COPY_SLACK times what the bandwidth measured at open predicts, so that work
overlapping them gains little): a candidate cannot start before its inputs exist, and its outputs
are copied the moment its stream says it is done, so work it finishes after saying so is either
on the clock or missing from the copy the outputs are checked in.

What a pass costs besides its calls is fixed (measured on an H200: 9.7 us for an empty pass,
0.28 ms with one call, the second context's first kernel) and cancels in the slope of passes of
1 and k calls (tools/timing/clocks.py `Passes`).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable

if TYPE_CHECKING:
    from tools.processes.process import WorkerProcess

SPIN_BASE_MS = 1.0  # the busy-wait before a pass: the request's round trip ...
SPIN_PER_CALL_MS = 0.25  # ... and this much host work per call (the blocks' pre-roll hides 0.2 ms)
SPIN_TRIES = 3  # waits of 1x, 2x, 4x before a pass is taken with the host's time on its clock


@dataclass
class Reading:
    """One pass as the parent's events saw it (ms)."""
    gate_to_done: float  # the gate opening to the worker's DONE
    copy_in: float  # the parent's copy of the inputs in (0 without one)
    copy_out: float  # ... and of the outputs out
    covered: bool  # the worker had queued everything before the gate opened
    spin_ms: float

    @property
    def clock(self) -> float:
        """start to end: the calls, the copies and the handshakes."""
        return self.copy_in + self.gate_to_done + self.copy_out


class GateClock:
    """The parent's side: a stream of its own (a pass that never ends blocks only it), a
    calibrated busy-wait and an L2 flush buffer. One per second-clock check."""

    def __init__(self, device: str) -> None:
        import torch

        self.device = torch.device(device)
        self.stream = torch.cuda.Stream(self.device)
        self.side = torch.cuda.Stream(self.device)
        l2 = torch.cuda.get_device_properties(self.device).L2_cache_size
        self.flush = torch.empty(max(2 * l2, 1 << 20) // 4, dtype=torch.int32, device=self.device)
        self.cycles_per_ms = self._calibrate()

    def _calibrate(self) -> float:
        import torch

        cycles = 1_000_000
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        with torch.cuda.stream(self.stream):
            torch.cuda._sleep(cycles)
            start.record()
            torch.cuda._sleep(cycles)
            end.record()
        end.synchronize()
        return cycles / max(float(start.elapsed_time(end)), 1e-3)

    def run(self, proc: "WorkerProcess", request: Callable[[dict[str, Any], float], tuple[dict[str, Any], bytes]],
            msg: dict[str, Any], calls: int, timeout: float, copy_in: tuple[Any, Any] | None = None,
            copy_out: tuple[Any, Any] | None = None) -> tuple[dict[str, Any], bytes, Reading]:
        """One gated pass of `calls` calls, run again with a longer busy-wait while the worker's
        reply came after the gate opened. `copy_in`/`copy_out` are (target, source) views."""
        spin = SPIN_BASE_MS + SPIN_PER_CALL_MS * calls
        for attempt in range(SPIN_TRIES):
            header, payload, reading = self._once(proc, request, msg, spin, timeout, copy_in, copy_out)
            # a reply that announces new memory goes back as it is: its handle must be taken now
            if reading.covered or header.get("op") == "error" or header.get("arena") or attempt == SPIN_TRIES - 1:
                return header, payload, reading
            spin *= 2
        raise AssertionError("unreachable")

    def _once(self, proc: "WorkerProcess", request: Callable[[dict[str, Any], float], tuple[dict[str, Any], bytes]],
              msg: dict[str, Any], spin_ms: float, timeout: float, copy_in: tuple[Any, Any] | None,
              copy_out: tuple[Any, Any] | None) -> tuple[dict[str, Any], bytes, Reading]:
        import torch

        from tools.wire.stream_ops import DONE_OFFSET, GATE_OFFSET, wait_value, write_value

        words = proc.gate_of(timeout).data_ptr()
        proc.gate_seq += 1
        seq = proc.gate_seq
        names = ("start", "copied", "done", "end")
        ev = {name: torch.cuda.Event(enable_timing=True) for name in names}
        with torch.cuda.stream(self.stream):
            torch.cuda._sleep(int(spin_ms * self.cycles_per_ms))
            self.flush.bitwise_xor_(1)  # every call reads its inputs from memory, as in the timed blocks
            ev["start"].record()
            if copy_in is not None:
                copy_in[0].copy_(copy_in[1])
            ev["copied"].record()
            write_value(self.stream, words + GATE_OFFSET, seq)
            wait_value(self.stream, words + DONE_OFFSET, seq)
            ev["done"].record()
            if copy_out is not None:
                copy_out[0].copy_(copy_out[1])
            ev["end"].record()
        finished = False
        try:
            header, payload = request({**msg, "gate": seq}, timeout)
            covered = not ev["copied"].query()
            failed = header.get("op") == "error"  # the worker may have stopped before its DONE
            finished = not failed and self._wait(ev["end"], timeout)
        finally:
            if not finished:  # the worker never said DONE: say it for it, so the stream moves on
                write_value(self.side, words + DONE_OFFSET, seq)
                ev["end"].synchronize()
        if failed:
            return header, payload, Reading(0.0, 0.0, 0.0, covered, spin_ms)
        if not finished:
            raise TimeoutError(f"a timed pass did not end within {timeout:.0f} s of the worker's answer")
        reading = Reading(gate_to_done=ev["copied"].elapsed_time(ev["done"]),
                          copy_in=ev["start"].elapsed_time(ev["copied"]) if copy_in is not None else 0.0,
                          copy_out=ev["done"].elapsed_time(ev["end"]) if copy_out is not None else 0.0,
                          covered=covered, spin_ms=spin_ms)
        return header, payload, reading

    @staticmethod
    def _wait(event: Any, timeout: float) -> bool:
        """Wait for `event` (the worker has answered: its DONE should follow soon), at most
        `timeout` seconds."""
        import time

        limit = time.monotonic() + timeout
        while not event.query():
            if time.monotonic() > limit:
                return False
            time.sleep(0.0002)
        return True
