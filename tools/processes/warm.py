"""A warm pool: the evaluator's workers started before the problem that will use them is known.

A process that evaluates problem after problem on one device (a batch slot on a Ray cluster, an
RL reward actor) pays, per problem, for starting a reference worker (Python, torch, a CUDA
context, the evaluator's own kernels) and the candidate workers kept spare (the same, inside the
OS sandbox): seconds each time. A `WarmPool` keeps one reference worker started and not yet told
its problem, and the spare candidate workers an evaluator leaves unused when it closes, so the
next problem's `Evaluator(problem, options, pool=pool)` finds them ready:

- the reference: one is always kept started; when an evaluator takes it, the next one starts at
  once (it idles while the problem runs: one more process and CUDA context on the device);
- candidates: an evaluator's unused spares come back when it closes (they were never handed a
  candidate), up to `options.spares`; a candidate worker that ran a candidate is never reused;
- a worker whose environment was started under other values than now (a variable the problem
  reads, CUDA_VISIBLE_DEVICES) is discarded and a new one started: what a problem sees does not
  depend on when its worker started.

Nothing a problem or a candidate did reaches the next problem: each reference worker loads one
problem and ends with it (tools/worker/reference.py refuses a second), each candidate worker
serves one evaluation. What is shared is what was shared before within one evaluator: the spawner
(tools/processes/spawner.py), with its scratch root, its artifact cache and its one measurement of the copy
bandwidth.
"""
from __future__ import annotations

import collections
import shutil
import threading
from collections.abc import Iterable
from typing import TYPE_CHECKING

from tools.processes.process import WorkerProcess
from tools.processes.spawner import SPAWN_FIELDS, Spawner, environment_fingerprint, spawn_key

if TYPE_CHECKING:
    from tools.options import EvalOptions


class WarmPool:
    """Started workers for the evaluators of one device and one set of options (module docstring).
    Thread-safe. Raises SandboxUnavailable as an Evaluator would. Close it when done (or use it as
    a context manager): its workers and its scratch root go with it."""

    def __init__(self, options: "EvalOptions | None" = None, *, start: bool = True) -> None:
        """`start`: start a reference worker now (else when the first evaluator takes none)."""
        from tools.options import EvalOptions, resolved

        self.options = resolved(options or EvalOptions())
        self.spawner = Spawner(self.options)
        self._lock = threading.Lock()
        self._reference: WorkerProcess | None = None
        self._candidates: collections.deque[WorkerProcess] = collections.deque()
        self._closed = False
        self.taken = {"reference": 0, "candidate": 0}  # workers handed out started ahead (for the record)
        if start:
            with self._lock:
                self._start_reference()

    def __enter__(self) -> "WarmPool":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def check(self, options: "EvalOptions") -> None:
        """ValueError unless workers started for this pool fit an evaluator with `options`."""
        if spawn_key(options) != self.spawner.key:  # both resolved (tools.options.resolved)
            differ = [name for name, a, b in zip(SPAWN_FIELDS, spawn_key(options), self.spawner.key) if a != b]
            raise ValueError(f"the warm pool's workers were started with other options ({', '.join(differ)})")

    def _start_reference(self) -> None:
        if not self._closed and self._reference is None:
            self._reference = self.spawner.spawn("reference")

    def take_reference(self) -> WorkerProcess | None:
        """The started reference worker, its problem not yet loaded, or None (the caller starts
        one). The next one starts now."""
        with self._lock:
            held, self._reference = self._reference, None
            try:
                self._start_reference()
            except BaseException:  # an interrupt, or no process to be had: the one taken is not lost
                if held is not None:
                    held.close()
                raise
        return self._usable(held, "reference")

    def take_candidate(self) -> WorkerProcess | None:
        """A started candidate worker that never held a candidate, or None."""
        while True:
            with self._lock:
                if not self._candidates:
                    return None
                held = self._candidates.popleft()
            proc = self._usable(held, "candidate")
            if proc is not None:
                return proc

    def _usable(self, proc: WorkerProcess | None, role: str) -> WorkerProcess | None:
        if proc is None:
            return None
        if not proc.alive() or proc.environment != environment_fingerprint():
            proc.close()
            shutil.rmtree(Spawner.scratch_of(proc), ignore_errors=True)  # no evaluator holds it: it would stay
            return None
        self.taken[role] += 1
        return proc

    def give_back(self, workers: Iterable[WorkerProcess]) -> list[WorkerProcess]:
        """Keep unused candidate workers (never handed a candidate) for the next evaluator, up to
        `options.spares`; returns those kept (the caller closes the rest)."""
        kept: list[WorkerProcess] = []
        with self._lock:
            for proc in workers:
                if self._closed or len(self._candidates) >= self.options.spares or not proc.alive():
                    continue
                self._candidates.append(proc)
                kept.append(proc)
        return kept

    def close(self) -> None:
        with self._lock:
            self._closed = True
            held = [self._reference] if self._reference else []
            held += list(self._candidates)
            self._reference = None
            self._candidates.clear()
        for proc in held:
            proc.close()
        self.spawner.close()


class WarmPools:
    """The warm pool of a process that evaluates problem after problem (a batch slot): one pool for
    the options its evaluators use; an evaluator with other worker options gets a new pool, and
    the old one is closed. Thread-safe."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._pool: WarmPool | None = None
        self._taken = {"reference": 0, "candidate": 0}  # over the pools closed so far

    def for_options(self, options: "EvalOptions") -> WarmPool:
        from tools.options import resolved

        with self._lock:
            if self._pool is not None and self._pool.spawner.key != spawn_key(resolved(options)):
                self._retire()
            if self._pool is None:  # the first evaluator starts its own workers; the pool those of the next
                self._pool = WarmPool(options, start=False)
            return self._pool

    def taken(self) -> dict[str, int]:
        """Workers handed out started ahead, by role, over this process's life."""
        with self._lock:
            now = self._pool.taken if self._pool is not None else {}
            return {role: n + now.get(role, 0) for role, n in self._taken.items()}

    def _retire(self) -> None:
        if self._pool is not None:
            for role, n in self._pool.taken.items():
                self._taken[role] += n
            self._pool.close()
            self._pool = None

    def close(self) -> None:
        with self._lock:
            self._retire()
