"""An evaluator's spare candidate workers: started ahead of need, one handed to each evaluation.

When an evaluation takes a spare, the next one is started in a thread of its own, not in the
evaluation's: starting one (its bubblewrap sandbox, whose holder is a Python that must say
"ready", and a fork of the zygote) took 0.03-0.07 s, and it was on every evaluation's clock (the
`start` phase: 0.065-0.073 s of row_softmax's 0.58 s on an H200, where 3917b02 had 0.0001). The
new spare boots while the evaluation runs, as it did before.

A start that fails in that thread is logged and leaves the deque one short; the next evaluation
finding it empty starts one in its own thread, where the same failure is its verdict's business
(tools/judge/build.py retries, then says `error`).
"""
from __future__ import annotations

import collections
import logging
import threading
from collections.abc import Callable

from tools.processes.process import WorkerGone, WorkerProcess

log = logging.getLogger(__name__)
JOIN_S = 60.0  # a start in flight (it only launches: the worker's imports are waited for by wait_ready)


class Spares:
    """Thread-safe. `start()` returns a started (not yet ready) candidate worker."""

    def __init__(self, start: Callable[[], WorkerProcess]) -> None:
        self._start = start
        self._lock = threading.Lock()
        self._ready: collections.deque[WorkerProcess] = collections.deque()
        self._starting: list[threading.Thread] = []
        self._closed = False

    def add(self, count: int) -> None:
        """Start `count` spares now, in the caller's thread."""
        for _ in range(count):
            proc = self._start()
            with self._lock:
                self._ready.append(proc)

    def take(self) -> WorkerProcess | None:
        with self._lock:
            return self._ready.popleft() if self._ready else None

    def replenish(self) -> None:
        """Start one more spare in a thread of its own."""
        thread = threading.Thread(target=self._start_one, name="ratchet-spare", daemon=True)
        with self._lock:
            if self._closed:
                return
            self._starting = [t for t in self._starting if t.is_alive()]
            self._starting.append(thread)
        thread.start()

    def _start_one(self) -> None:
        try:
            proc = self._start()
        except Exception:  # noqa: BLE001 - logged; the next evaluation starts one in its own thread
            log.warning("a spare candidate worker did not start", exc_info=True)
            return
        with self._lock:
            if not self._closed:
                self._ready.append(proc)
                return
        proc.close()  # the evaluator closed meanwhile

    def wait_started(self) -> None:
        """Wait for the starts in flight (their processes exist once this returns)."""
        with self._lock:
            starting = list(self._starting)
        for thread in starting:
            thread.join(JOIN_S)

    def settle(self, timeout: float) -> None:
        """Every spare started and done with its start's GPU work (a quiet device for a baseline)."""
        for proc in self.workers():
            try:
                proc.settle(timeout)
            except WorkerGone:
                pass  # a spare that did not start: the evaluation that takes it says so

    def drain(self) -> list[WorkerProcess]:
        """Close for good: the spares (the starts in flight included), none started after this returns."""
        self.wait_started()
        with self._lock:
            self._closed = True  # a start asked for after this closes its own worker
            ready, self._ready = list(self._ready), collections.deque()
        return ready

    def workers(self) -> list[WorkerProcess]:
        """The spares, once the starts in flight are done (for whoever looks at them: tests, a pool)."""
        self.wait_started()
        with self._lock:
            return list(self._ready)

    def __iter__(self):
        return iter(self.workers())

    def __getitem__(self, i: int) -> WorkerProcess:
        return self.workers()[i]

    def __len__(self) -> int:
        return len(self.workers())
