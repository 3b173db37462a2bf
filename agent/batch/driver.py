"""Batch runs: the agent over every problem of a suite, one problem per worker at a time.

The pieces, from the unit of work outwards:

- `run_problem(spec) -> row` (agent.batch.problem): one agent run on one problem
  (agent.loop.runner.optimize), from a JSON-serializable spec to a JSON-serializable row. A plain
  module-level function: it pickles by reference, holds no state between calls, and reads only
  its spec, the environment (the API key, CUDA_VISIBLE_DEVICES) and the problem's workspace. It
  is what any executor runs.
- `Scheduler`: anything that takes `submit(fn, spec)` and returns a `concurrent.futures.Future`.
  `LocalScheduler` (agent.batch.local) gives each device slot its own subprocess per problem,
  with CUDA_VISIBLE_DEVICES set to that slot's GPU (or the CPU, under Triton's interpreter);
  slots pull from one shared queue, so no GPU idles while work remains. `ExecutorScheduler`
  wraps any `concurrent.futures.Executor`: a ProcessPoolExecutor, Dask's
  `Client.get_executor(resources={"GPU": 1})`, or a Ray adaptor (see docs/batch.md) - that is
  how more hosts are added, through an existing engine rather than one of ours.
- `RunLog` (agent.batch.log): the run's JSONL file, one row per finished problem, appended
  (flush + fsync) the moment the problem ends; a torn last line (a crash mid-write) is dropped
  on read and cut off before the next append.
- `run_batch`: the driver. It submits every unfinished problem, writes each row as its future
  completes, and prints progress on stderr (done/total, the suite's figures so far, an ETA).

A run directory (`--out`) holds `run.json` (what was run, with which settings), `results.jsonl`
and `logs/<problem>.log` (each problem's agent log), as agent.batch.log names them; `ratchet
report DIR` reads it.
"""
from __future__ import annotations

import concurrent.futures
import re
import sys
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from agent.batch.log import FINAL, RunLog
from agent.batch.problem import crashed_row, problem_key, run_problem


# --- problems ----------------------------------------------------------------------------------


def _natural_key(path: Path) -> tuple:
    """`2_Foo.py` before `10_Bar.py`: numbers compare as numbers (KernelBench's file names)."""
    return tuple(int(part) if part.isdigit() else part.lower() for part in re.split(r"(\d+)", path.name))


def discover(suite: Path, pattern: str | None = None) -> list[Path]:
    """The problem files of a suite directory: `*.py` at its top level (not `_*.py`), in natural
    order, those whose stem matches `pattern` (re.search) when one is given."""
    if not suite.is_dir():
        raise ValueError(f"{suite}: not a directory")
    regex = re.compile(pattern) if pattern else None
    files = [p for p in suite.iterdir() if p.suffix == ".py" and p.is_file() and not p.name.startswith(("_", "."))]
    return sorted((p for p in files if regex is None or regex.search(p.stem)), key=_natural_key)


# --- schedulers --------------------------------------------------------------------------------


@runtime_checkable
class Scheduler(Protocol):
    """Where problems run. `submit` returns at once with a concurrent.futures.Future of the
    row; `slots` is how many problems run at the same time (the driver's ETA uses it);
    `shutdown(cancel=True)` stops what is queued and running (Ctrl-C)."""

    slots: int

    def submit(self, fn: Callable[[dict[str, Any]], dict[str, Any]], spec: dict[str, Any]) -> concurrent.futures.Future: ...

    def shutdown(self, cancel: bool = False) -> None: ...

    def describe(self) -> str: ...


class ExecutorScheduler:
    """Any concurrent.futures.Executor as a scheduler: ProcessPoolExecutor on one host, Dask's
    `Client(...).get_executor(resources={"GPU": 1})` or a Ray-backed executor across hosts. The
    executor decides which device a problem gets; `device` is the device its workers see."""

    def __init__(self, executor: concurrent.futures.Executor, slots: int, *, device: str = "cuda:0", name: str = ""):
        self.executor = executor
        self.slots = slots
        self.device = device
        self.name = name or type(executor).__name__

    def submit(self, fn, spec):
        return self.executor.submit(fn, {**spec, "device": self.device})

    def shutdown(self, cancel: bool = False) -> None:
        try:
            self.executor.shutdown(wait=not cancel, cancel_futures=cancel)
        except TypeError:  # an executor predating cancel_futures (Python 3.9's signature)
            self.executor.shutdown(wait=not cancel)

    def describe(self) -> str:
        return f"{self.slots} slot(s) on {self.name}"


# --- the driver --------------------------------------------------------------------------------


@dataclass
class Progress:
    """Progress lines on stderr: problems done of the total, the suite's figures so far, an ETA."""

    total: int
    done: int = 0  # finished before this session too
    started: float = 0.0
    finished_here: int = 0
    write: Callable[[str], None] = lambda line: print(line, file=sys.stderr, flush=True)

    def __post_init__(self) -> None:
        self.started = time.monotonic()

    def finished(self, row: dict[str, Any], rows: Iterable[dict[str, Any]], slots: int) -> None:
        self.finished_here += 1
        self.done += 1
        from agent.batch.report import headline, one_problem

        h = headline(list(rows))
        figures = f"correct {h['correct']}/{h['problems']}"
        if h["timing_measured"]:
            figures += f", geomean {h['geomean_speedup_vs_compile']:.2f}x vs torch.compile"
        self.write(f"[{self.done}/{self.total}] {row['problem']}: {one_problem(row)} | {figures} | ETA {self.eta(slots)}")

    def eta(self, slots: int) -> str:
        left = self.total - self.done
        if left <= 0:
            return "0s"
        if not self.finished_here:
            return "unknown"
        per_problem = (time.monotonic() - self.started) / self.finished_here  # wall seconds, all slots together
        return _duration(per_problem * left)


def _duration(seconds: float) -> str:
    seconds = int(round(seconds))
    if seconds < 60:
        return f"{seconds}s"
    if seconds < 3600:
        return f"{seconds // 60}m{seconds % 60:02d}s"
    return f"{seconds // 3600}h{seconds // 60 % 60:02d}m"


def pending(problems: Sequence[Path], log: RunLog, *, resume: bool) -> tuple[list[Path], int]:
    """The problems still to run and how many are done. Without --resume all run."""
    if not resume:
        return list(problems), 0
    latest = log.latest()
    todo = [p for p in problems if latest.get(problem_key(p), {}).get("status") not in FINAL]
    return todo, len(problems) - len(todo)


def run_batch(specs: Sequence[dict[str, Any]], scheduler: Scheduler, log: RunLog, *, total: int, done: int = 0,
              write: Callable[[str], None] | None = None,
              fn: Callable[[dict[str, Any]], dict[str, Any]] = run_problem) -> list[dict[str, Any]]:
    """Run every spec on the scheduler; append each row to `log` as soon as it arrives. Returns
    this session's rows. On KeyboardInterrupt the scheduler is shut down (running problems are
    interrupted; their workspaces keep every attempt, and --resume continues them) and it re-raises."""
    progress = Progress(total=total, done=done, **({"write": write} if write else {}))
    futures: dict[concurrent.futures.Future, tuple[dict[str, Any], float]] = {}
    for spec in specs:
        futures[scheduler.submit(fn, spec)] = (spec, time.monotonic())
    rows: list[dict[str, Any]] = []
    try:
        for future in concurrent.futures.as_completed(futures):
            spec, submitted = futures[future]
            try:
                row = future.result()
            except concurrent.futures.CancelledError:
                continue
            except Exception as exc:  # noqa: BLE001 - the worker died: the row says so
                row = crashed_row(spec, str(exc), getattr(exc, "seconds", time.monotonic() - submitted))
            if row.get("status") == "fenced":  # a run that lost its lease: the task holding it now reports
                continue
            log.append(row)
            rows.append(row)
            progress.finished(row, log.latest().values(), scheduler.slots)
    except BaseException:
        scheduler.shutdown(cancel=True)
        raise
    scheduler.shutdown()
    return rows


__all__ = ["discover", "Scheduler", "ExecutorScheduler", "run_batch", "pending"]
