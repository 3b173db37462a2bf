"""Children that must die with this process, started from a thread that lives as long as it.

Linux's PR_SET_PDEATHSIG (and bubblewrap's --die-with-parent, which uses it) fires when the
*thread* that forked the child ends, not its process (prctl(2): "the parent is considered to be
the thread that created this process"). A worker, or the bwrap holding a worker's sandbox,
started from a pool thread, a batch slot's thread or a server's connection thread was killed
(SIGKILL) as soon as that thread ended, and the next evaluation that took the spare found it dead:
an honest kernel judged `crashed` (seen from the RL reward when its thread pool grew, from
`ratchet serve` when an episode's connection closed, and as the batch tests' rare `crashed` first
attempt). So every such start runs here: on the main thread as it is (it lasts until the
interpreter ends), else on one daemon thread per process that never returns until exit.
"""
from __future__ import annotations

import os
import queue
import signal
import sys
import threading
from collections.abc import Callable
from concurrent.futures import Future
from typing import TypeVar

T = TypeVar("T")

_lock = threading.Lock()
_jobs: "queue.SimpleQueue[tuple[Callable[[], object], Future]]" = queue.SimpleQueue()
_thread: threading.Thread | None = None
_pid = 0  # the process _thread belongs to (a fork starts its own)


def die_with_parent() -> None:
    """Linux: SIGKILL this process when the parent (the thread that started it: above) dies, so no
    worker outlives its evaluator. Runs in the child between fork and exec (a `preexec_fn`)."""
    if sys.platform.startswith("linux"):
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


def start_child(start: Callable[[], T]) -> T:
    """Run `start` (a subprocess.Popen of a child with a parent-death signal) on a thread that
    lives as long as this process, and return what it returns (or raise what it raises)."""
    if threading.current_thread() is threading.main_thread():
        return start()
    future: Future = Future()
    _jobs_for_this_process().put((start, future))
    return future.result()


def _jobs_for_this_process() -> "queue.SimpleQueue[tuple[Callable[[], object], Future]]":
    global _thread, _pid, _jobs
    with _lock:
        if _thread is None or _pid != os.getpid() or not _thread.is_alive():
            _jobs, _pid = queue.SimpleQueue(), os.getpid()
            _thread = threading.Thread(target=_serve, args=(_jobs,), name="ratchet-launcher", daemon=True)
            _thread.start()
        return _jobs


def _serve(jobs: "queue.SimpleQueue[tuple[Callable[[], object], Future]]") -> None:
    while True:
        start, future = jobs.get()
        if not future.set_running_or_notify_cancel():
            continue
        try:
            future.set_result(start())
        except BaseException as exc:  # noqa: BLE001 - handed to the caller, who raises it
            future.set_exception(exc)
