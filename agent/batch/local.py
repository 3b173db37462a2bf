"""The local scheduler: one slot per GPU (or N CPU slots), one subprocess per problem.

Every slot is a thread that takes the next problem from one shared queue, starts
`python -m agent.batch.local` with CUDA_VISIBLE_DEVICES set to the slot's GPU (on a CPU slot: no
GPU, TRITON_INTERPRET=1), hands it `{"fn": "module:function", "spec": {...}}` as one JSON line on
stdin and reads the row back as one JSON line on stdout. A fresh process per problem keeps
problems apart (a crash, a leak or a sticky CUDA error ends with that problem) and costs a few
seconds against runs of minutes.

The child keeps its stdin open: when the batch process dies (even by SIGKILL) the pipe closes
and the child exits at once; its evaluator workers follow when their own pipes close. The child's
stdout is the result channel only: anything printed goes to its stderr, the problem's log.
"""
from __future__ import annotations

import concurrent.futures
import importlib
import json
import os
import queue
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agent.cli.exit_codes import EXIT_INTERRUPTED, EXIT_OK, EXIT_PARENT_GONE

PROJECT_ROOT = Path(__file__).resolve().parents[2]
GRACE_S = 15.0  # after SIGINT, how long a child may take to stop before SIGKILL


class WorkerCrashed(Exception):
    """A problem's worker process ended without a row; str() is one line, `seconds` its run time."""

    def __init__(self, message: str, seconds: float):
        super().__init__(message)
        self.seconds = seconds


@dataclass
class Slot:
    """One place a problem runs: a GPU (`gpu` is its CUDA_VISIBLE_DEVICES value) or a CPU worker."""

    name: str
    device: str  # as the worker sees it: cuda:0 or cpu
    env: dict[str, str] = field(default_factory=dict)

    @classmethod
    def gpu(cls, gpu: str) -> "Slot":
        return cls(f"GPU {gpu}", "cuda:0", {"CUDA_VISIBLE_DEVICES": gpu})

    @classmethod
    def cpu(cls, index: int) -> "Slot":
        return cls(f"CPU worker {index}", "cpu", {"CUDA_VISIBLE_DEVICES": "", "TRITON_INTERPRET": "1"})


def function_name(fn: Callable) -> str:
    return f"{fn.__module__}:{fn.__qualname__}"


def resolve_function(name: str) -> Callable:
    module, _, qualname = name.partition(":")
    obj: Any = importlib.import_module(module)
    for part in qualname.split("."):
        obj = getattr(obj, part)
    return obj


class LocalScheduler:
    """Problems from one queue onto device slots, each in a subprocess (see the module docstring)."""

    def __init__(self, slots: Sequence[Slot], *, python: str = sys.executable):
        if not slots:
            raise ValueError("no slots")
        self.slot_list = list(slots)
        self.slots = len(self.slot_list)
        self.python = python
        self._queue: queue.Queue = queue.Queue()
        self._running: dict[int, subprocess.Popen] = {}
        self._lock = threading.Lock()
        self._stopping = False
        self._threads = [threading.Thread(target=self._serve, args=(slot,), name=f"slot-{slot.name}", daemon=True)
                         for slot in self.slot_list]
        for thread in self._threads:
            thread.start()

    def describe(self) -> str:
        return ", ".join(slot.name for slot in self.slot_list)

    def submit(self, fn: Callable[[dict[str, Any]], dict[str, Any]], spec: dict[str, Any]) -> concurrent.futures.Future:
        future: concurrent.futures.Future = concurrent.futures.Future()
        self._queue.put((future, function_name(fn), spec))
        return future

    def shutdown(self, cancel: bool = False) -> None:
        with self._lock:
            self._stopping = cancel
        if cancel:
            while True:
                try:
                    item = self._queue.get_nowait()
                except queue.Empty:
                    break
                if item is not None:
                    item[0].cancel()
            with self._lock:
                running = list(self._running.values())
            for proc in running:
                _signal_group(proc, signal.SIGINT)
            deadline = time.monotonic() + GRACE_S
            for proc in running:
                try:
                    proc.wait(max(0.1, deadline - time.monotonic()))
                except subprocess.TimeoutExpired:
                    _signal_group(proc, signal.SIGKILL)
        for _ in self._threads:
            self._queue.put(None)
        for thread in self._threads:
            thread.join(timeout=GRACE_S + 5)

    # --- a slot ------------------------------------------------------------------------------
    def _serve(self, slot: Slot) -> None:
        while True:
            item = self._queue.get()
            if item is None:
                return
            future, fn_name, spec = item
            if not future.set_running_or_notify_cancel():
                continue
            try:
                future.set_result(self._run(slot, fn_name, {**spec, "device": slot.device}))
            except BaseException as exc:  # noqa: BLE001 - handed to the driver through the future
                future.set_exception(exc)

    def _run(self, slot: Slot, fn_name: str, spec: dict[str, Any]) -> dict[str, Any]:
        started = time.monotonic()
        env = {**os.environ, **slot.env}
        env["PYTHONPATH"] = os.pathsep.join(p for p in (str(PROJECT_ROOT), env.get("PYTHONPATH", "")) if p)
        log_path = spec.get("log")
        stderr = open(log_path, "ab") if log_path else subprocess.DEVNULL  # noqa: SIM115
        try:
            with self._lock:
                if self._stopping:
                    raise concurrent.futures.CancelledError()
                proc = subprocess.Popen([self.python, "-m", "agent.batch.local"], stdin=subprocess.PIPE,
                                        stdout=subprocess.PIPE, stderr=stderr, env=env, start_new_session=True)
                self._running[proc.pid] = proc
        finally:
            if log_path:
                stderr.close()
        try:
            assert proc.stdin is not None and proc.stdout is not None
            proc.stdin.write((json.dumps({"fn": fn_name, "spec": spec}) + "\n").encode())
            proc.stdin.flush()  # stdin stays open: its end tells the child that we are gone
            out = proc.stdout.read()
            code = proc.wait()
        finally:
            with self._lock:
                self._running.pop(proc.pid, None)
            if proc.stdin:
                proc.stdin.close()
        seconds = time.monotonic() - started
        with self._lock:
            if self._stopping:
                raise concurrent.futures.CancelledError()
        lines = [line for line in out.decode(errors="replace").splitlines() if line.strip()]
        if code == EXIT_OK and lines:
            try:
                row = json.loads(lines[-1])
            except ValueError:
                row = None
            if isinstance(row, dict):
                return row
        how = f"killed by signal {-code}" if code < 0 else f"exit code {code}"
        raise WorkerCrashed(f"the worker on {slot.name} ended without a result ({how}); see {log_path or 'its log'}",
                            seconds)


def _signal_group(proc: subprocess.Popen, sig: int) -> None:
    try:
        os.killpg(proc.pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


# --- the child ---------------------------------------------------------------------------------


def _watch_parent() -> None:
    """Exit the moment the batch process is gone (our stdin reaches its end). Raw reads on fd 0:
    a daemon thread blocked inside sys.stdin's buffered reader would hold its lock at shutdown."""
    while True:
        try:
            if not os.read(0, 65536):
                break
        except InterruptedError:
            continue
        except OSError:
            break
    os._exit(EXIT_PARENT_GONE)


def _read_line(fd: int) -> bytes:
    data = b""
    while not data.endswith(b"\n"):
        chunk = os.read(fd, 1)
        if not chunk:
            break
        data += chunk
    return data


def main() -> int:
    result_fd = os.dup(1)
    os.dup2(2, 1)  # stray prints go to the log, never into the result channel
    job = json.loads(_read_line(0))
    threading.Thread(target=_watch_parent, name="watch-parent", daemon=True).start()
    try:
        row = resolve_function(job["fn"])(job["spec"])
    except KeyboardInterrupt:
        print("batch worker: interrupted", file=sys.stderr, flush=True)
        return EXIT_INTERRUPTED
    os.write(result_fd, (json.dumps(row) + "\n").encode())
    os.close(result_fd)
    return EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
