"""Batch runs: the agent over every problem of a suite, one problem per worker at a time.

The pieces, from the unit of work outwards:

- `run_problem(spec) -> row`: one agent run on one problem (agent.runner.optimize), from a
  JSON-serializable spec to a JSON-serializable row. A plain module-level function: it pickles
  by reference, holds no state between calls, and reads only its spec, the environment (the API
  key, CUDA_VISIBLE_DEVICES) and the problem's workspace. It is what any executor runs.
- `Scheduler`: anything that takes `submit(fn, spec)` and returns a `concurrent.futures.Future`.
  `LocalScheduler` (agent.batch_local) gives each device slot its own subprocess per problem,
  with CUDA_VISIBLE_DEVICES set to that slot's GPU (or the CPU, under Triton's interpreter);
  slots pull from one shared queue, so no GPU idles while work remains. `ExecutorScheduler`
  wraps any `concurrent.futures.Executor`: a ProcessPoolExecutor, Dask's
  `Client.get_executor(resources={"GPU": 1})`, or a Ray adaptor (see agent/BATCH.md) - that is
  how more hosts are added, through an existing engine rather than one of ours.
- `RunLog`: the run's JSONL file, one row per finished problem, appended (flush + fsync) the
  moment the problem ends; a torn last line (a crash mid-write) is dropped on read and cut
  off before the next append.
- `run_batch`: the driver. It submits every unfinished problem, writes each row as its future
  completes, and prints progress on stderr (done/total, the suite's figures so far, an ETA).

A run directory (`--out`) holds `run.json` (what was run, with which settings), `results.jsonl`
and `logs/<problem>.log` (each problem's agent log); `ratchet report DIR` reads it.
"""
from __future__ import annotations

import concurrent.futures
import json
import math
import os
import re
import socket
import sys
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

ROW_SCHEMA = 1
RESULTS = "results.jsonl"
RUN_META = "run.json"
LOGS = "logs"
# Row statuses. A problem whose latest row has one of FINAL is done; --resume retries the others.
FINAL = frozenset({"finished", "invalid_problem"})
RETRY = frozenset({"stopped", "model_error", "error", "crashed"})


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


def problem_key(path: Path) -> str:
    """How a row names its problem: the file's stem (unique within one suite directory)."""
    return path.stem


# --- the unit of work --------------------------------------------------------------------------


def make_spec(problem: Path, *, device: str = "cpu", settings: dict[str, Any] | None = None,
              config_file: str | None = None, resume: bool = False, since: float | None = None,
              log: Path | None = None) -> dict[str, Any]:
    """A problem's spec: plain JSON. `settings` are the agent settings given on the command line
    (AgentConfig field names, no secrets: the worker reads the API key from its environment or
    the config file); `device` is as the worker sees it (`cuda:0` once CUDA_VISIBLE_DEVICES
    narrowed it to one GPU). With `resume`, an unfinished agent run of this problem started at or
    after `since` (unix seconds) is continued instead of starting a new one."""
    return {"problem": str(problem.resolve()), "key": problem_key(problem), "device": device,
            "settings": dict(settings or {}), "config_file": config_file, "resume": resume,
            "since": since, "log": str(log) if log else None}


def run_problem(spec: dict[str, Any]) -> dict[str, Any]:
    """Run (or continue) the agent on one problem; return its row. Never raises for what the
    problem, the model or the workspace does: those end as a row with a status."""
    started, started_wall = time.monotonic(), time.time()
    log_file = open(spec["log"], "a", buffering=1) if spec.get("log") else None  # noqa: SIM115

    def log(line: str) -> None:
        print(line, file=log_file or sys.stderr, flush=True)

    row: dict[str, Any] = {
        "schema": ROW_SCHEMA, "problem": spec["key"], "path": spec["problem"], "device": spec["device"],
        "gpu": os.environ.get("CUDA_VISIBLE_DEVICES") if spec["device"].startswith("cuda") else None,
        "host": socket.gethostname(), "started_at": round(started_wall, 3),
    }
    try:
        row.update(_run_agent(spec, log))
    except Exception as exc:  # noqa: BLE001 - one problem's bug must not end the batch; the row says what
        log(f"batch: {type(exc).__name__}: {exc}")
        row.update(status="error", verdict="error", error=_one_line(f"{type(exc).__name__}: {exc}"))
    finally:
        if log_file:
            log_file.close()
    row["device_s"] = round(time.monotonic() - started, 3)
    row["finished_at"] = round(time.time(), 3)
    return _complete_row(row)


def _run_agent(spec: dict[str, Any], log: Callable[[str], None]) -> dict[str, Any]:
    from agent.cmd_optimize import model_client
    from agent.config import load_config
    from agent.runner import NothingToResume, optimize
    from agent.workspace import WorkspaceError
    from tools import ProblemError

    problem = Path(spec["problem"])
    config = load_config({**spec["settings"], "device": spec["device"]}, config_file=spec.get("config_file"))
    client = model_client(config)
    resume = bool(spec.get("resume")) and _has_unfinished_run(problem, config, spec.get("since"))
    try:
        try:
            result = optimize(problem, config, client, resume=resume, log=log)
        except NothingToResume as exc:  # the run finished or vanished since we looked: start afresh
            log(f"batch: {exc}; starting a new run")
            result = optimize(problem, config, client, resume=False, log=log)
    except ProblemError as exc:
        return {"status": "invalid_problem", "verdict": "invalid_problem", "error": _one_line(str(exc))}
    except WorkspaceError as exc:
        return {"status": "error", "verdict": "error", "error": _one_line(str(exc))}
    finally:
        close = getattr(client, "close", None)
        if close:
            close()
    s = result.summary
    best = s.get("best") or {}
    row = {
        "status": s["status"], "resumed": resume, "exit_code": result.exit_code,
        "verdict": "ok" if best else (s["verdicts"][-1] if s["verdicts"] else "no_attempt"),
        "correct": bool(best), "timing_measured": bool(best.get("timing_measured")),
        "speedup_vs_eager": best.get("speedup_vs_eager"), "speedup_vs_compile": best.get("speedup_vs_compile"),
        "roofline_fraction": best.get("roofline_fraction"), "candidate_ms": best.get("median_ms"),
        "best_attempt": best.get("attempt"), "attempts": s["attempts"], "attempts_used": s["attempts_used"],
        "correct_attempts": s["correct"], "format_errors": s["format_errors"], "tokens": s["tokens_used"],
        "model_calls": s["model_calls"], "agent_wall_s": s["wall_s"], "model": s["model"], "run_id": s["run_id"],
        "stop_reason": s["stop_reason"], "error": s["error"], "workspace": s["workspace"], "best_path": s["best_path"],
    }
    row.update(_baseline_times(Path(s["workspace"]), best.get("attempt")))
    return row


def _has_unfinished_run(problem: Path, config: Any, since: float | None) -> bool:
    """Whether the problem's workspace holds an unfinished agent run started at or after `since`."""
    from agent.runner import STATE_DIR
    from agent.workspace import Workspace, WorkspaceError

    try:
        with Workspace(config.workspace).open_existing(problem) as repo:
            pointer_path = repo.path.parent / STATE_DIR / f"{repo.name}.run.json"
    except (WorkspaceError, OSError):
        return False
    try:
        pointer = json.loads(pointer_path.read_text())
        begun = time.mktime(time.strptime(pointer["started_at"][:19], "%Y-%m-%dT%H:%M:%S"))
    except (OSError, ValueError, KeyError, TypeError):
        return False
    return not pointer.get("finished") and (since is None or begun >= math.floor(since) - 1)


def _baseline_times(workspace: Path, attempt: int | None) -> dict[str, Any]:
    """Eager and torch.compile medians and the roofline floor, from the best attempt's record
    (else the latest attempt's): what the report's chart is drawn against."""
    from agent.workspace import Workspace, WorkspaceError

    out: dict[str, Any] = {"eager_ms": None, "compile_ms": None, "floor_ms": None}
    try:
        with Workspace(workspace.parent).open_existing(workspace.name) as repo:
            chosen = repo.attempt(attempt) if attempt else repo.latest()
            record = repo.record(chosen) if chosen else None
    except (WorkspaceError, OSError, ValueError):
        return out
    if not record:
        return out
    for key, field in (("eager_ms", "eager_time"), ("compile_ms", "compile_time")):
        stats = record.get(field) or {}
        out[key] = stats.get("median_ms") if stats.get("measured") else None
    roofline = record.get("roofline") or {}
    out["floor_ms"] = roofline.get("floor_ms") if roofline.get("measured") else None
    return out


def _complete_row(row: dict[str, Any]) -> dict[str, Any]:
    """Every row carries every field (None where unknown), so readers need no special cases."""
    for key in ("status", "verdict", "error", "resumed", "exit_code", "correct", "timing_measured",
                "speedup_vs_eager", "speedup_vs_compile", "roofline_fraction", "candidate_ms", "eager_ms",
                "compile_ms", "floor_ms", "best_attempt", "attempts", "attempts_used", "correct_attempts",
                "format_errors", "tokens", "model_calls", "agent_wall_s", "model", "run_id", "stop_reason",
                "workspace", "best_path", "device_s"):
        row.setdefault(key, None)
    for key in ("attempts", "attempts_used", "correct_attempts", "format_errors", "tokens", "model_calls"):
        row[key] = row[key] or 0
    row["correct"] = bool(row["correct"])
    row["timing_measured"] = bool(row["timing_measured"])
    return row


def crashed_row(spec: dict[str, Any], message: str, seconds: float) -> dict[str, Any]:
    """The row of a problem whose worker died without answering."""
    return _complete_row({"schema": ROW_SCHEMA, "problem": spec["key"], "path": spec["problem"],
                          "device": spec["device"], "status": "crashed", "verdict": "crashed",
                          "error": _one_line(message), "device_s": round(seconds, 3),
                          "finished_at": round(time.time(), 3)})


def _one_line(text: str, limit: int = 400) -> str:
    line = " ".join(str(text).split())
    return line if len(line) <= limit else line[: limit - 3] + "..."


# --- the results file --------------------------------------------------------------------------


class RunLog:
    """The run's JSONL: one row per finished problem. Appends are crash-safe: a row is one
    write of one line, flushed and fsynced before `append` returns; a torn last line (the writer
    died mid-write) is ignored on read and cut off before the next append."""

    def __init__(self, path: Path):
        self.path = Path(path)

    def rows(self) -> list[dict[str, Any]]:
        try:
            data = self.path.read_bytes()
        except FileNotFoundError:
            return []
        rows = []
        for line in data.split(b"\n"):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except ValueError:
                continue  # torn (the last line) or damaged: never a row
            if isinstance(row, dict) and "problem" in row:
                rows.append(row)
        return rows

    def latest(self) -> dict[str, dict[str, Any]]:
        """The latest row of each problem (a retried problem has several)."""
        return {row["problem"]: row for row in self.rows()}

    def repair(self) -> None:
        """Cut a torn last line off, so the next row starts on a line of its own."""
        try:
            data = self.path.read_bytes()
        except FileNotFoundError:
            return
        if data and not data.endswith(b"\n"):
            with open(self.path, "r+b") as f:
                f.truncate(data.rfind(b"\n") + 1)
                f.flush()
                os.fsync(f.fileno())

    def append(self, row: dict[str, Any]) -> None:
        line = (json.dumps(row, sort_keys=True) + "\n").encode()
        fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, line)
            os.fsync(fd)
        finally:
            os.close(fd)


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
        from agent.report import headline, one_problem

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
            log.append(row)
            rows.append(row)
            progress.finished(row, log.latest().values(), scheduler.slots)
    except BaseException:
        scheduler.shutdown(cancel=True)
        raise
    scheduler.shutdown()
    return rows


__all__ = ["discover", "problem_key", "make_spec", "run_problem", "RunLog", "Scheduler", "ExecutorScheduler",
           "run_batch", "pending", "FINAL", "RETRY", "RESULTS", "RUN_META", "LOGS"]
