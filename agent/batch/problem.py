"""The unit of work of a batch: one agent run on one problem, from a JSON spec to a JSON row.

`run_problem(spec) -> row` is a plain module-level function: it pickles by reference, holds no
state between calls, and reads only its spec, the environment (the API key,
CUDA_VISIBLE_DEVICES) and the problem's workspace. It is what any executor runs (see
agent/batch/driver.py for the driver and the schedulers). Every row carries every field.

A task on a cluster node runs agent.batch.remote.run_remote_problem instead, which shares the
row's making (`problem_row`, `agent_row`) and writes through the driver's workspace service.

Row schema 2 added `executor` ("local", "ray", ...) and `node` (where it ran; None in a local
row); readers take schema-1 rows as they are (the two fields missing). Schema 3 added what a run
without timing (a CPU run) measured, for the report: `attempts_to_correct` (this run's attempts
up to and including its first correct one), and from the best attempt's record `trials` (the
correctness trials it passed), `distributions` (their input distributions, each once) and
`heldout` (each held-out variant and its outcome). Schema 4 added what the problem cost
(agent/cost.py): `cost_usd`, the agent run's dollars over every session of it (None: no price for
its model; 0.0 for the built-in policy, which spends no tokens), and `price`, the price it was
charged at (input, output, cached_input per million tokens, and where it came from; None without
one). Rows before schema 4 have neither: the report reads their cost as "not recorded". Schema 5
added `judge_s`, the seconds the agent run's evaluator spent judging candidates (every session of
it), and `judge_share`, that over the run's wall time (`agent_wall_s`): how busy the problem's GPU
was at most (issue 40); None in earlier rows and where the run has no wall time.
"""
from __future__ import annotations

import json
import math
import os
import socket
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tools.record import Verdict

ROW_SCHEMA = 5


def problem_key(path: Path) -> str:
    """How a row names its problem: the file's stem (unique within one suite directory)."""
    return path.stem


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
    log_file = open(spec["log"], "a", buffering=1) if spec.get("log") else None  # noqa: SIM115

    def log(line: str) -> None:
        print(line, file=log_file or sys.stderr, flush=True)

    try:
        return problem_row(spec, lambda: agent_row(spec, log), log, executor="local", node=None)
    finally:
        if log_file:
            log_file.close()


def problem_row(spec: dict[str, Any], work: Callable[[], dict[str, Any]], log: Callable[[str], None], *,
                executor: str, node: str | None, gpu: str | None = None) -> dict[str, Any]:
    """The row of one problem: where and when it ran, and what `work()` returned. An exception out of
    `work` ends as a row saying what (`fenced` where the run lost its lease: the driver discards it)."""
    from agent.batch.channel import Fenced

    started, started_wall = time.monotonic(), time.time()
    row: dict[str, Any] = {
        "schema": ROW_SCHEMA, "problem": spec["key"], "path": spec["problem"], "device": spec["device"],
        "gpu": gpu or (os.environ.get("CUDA_VISIBLE_DEVICES") if spec["device"].startswith("cuda") else None),
        "host": socket.gethostname(), "executor": executor, "node": node, "started_at": round(started_wall, 3),
    }
    try:
        row.update(work())
    except Fenced as exc:
        log(f"batch: {exc}")
        row.update(status="fenced", verdict="fenced", error=_one_line(str(exc)))
    except Exception as exc:  # noqa: BLE001 - one problem's bug must not end the batch; the row says what
        log(f"batch: {type(exc).__name__}: {exc}")
        row.update(status="error", verdict="error", error=_one_line(f"{type(exc).__name__}: {exc}"))
    row["device_s"] = round(time.monotonic() - started, 3)
    row["finished_at"] = round(time.time(), 3)
    return _complete_row(row)


def agent_row(spec: dict[str, Any], log: Callable[[str], None], *, problem: Path | None = None,
              resume: bool | None = None, store: Any = None, pools: Any = None) -> dict[str, Any]:
    """Run the agent on the spec's problem; the row's agent fields. A remote run passes the problem's
    file on its node, whether to resume (from its lease), its store (agent.loop.run_store) and its slot's
    warm pools (tools.processes.warm.WarmPools); a local one passes none of them: the spec's problem file, the
    workspace of its settings, a fresh evaluator."""
    from agent.batch.channel import Fenced
    from agent.model_choice import model_client
    from agent.config import load_config
    from agent.loop.runner import NothingToResume, optimize
    from agent.workspace.root import WorkspaceError
    from tools import ProblemError

    problem = problem or Path(spec["problem"])
    config = load_config({**spec["settings"], "device": spec["device"]}, config_file=spec.get("config_file"))
    client = model_client(config, problem, log)
    unrecognized = getattr(client, "unrecognized", None)
    if unrecognized:  # the built-in policy has no kernel for it: no attempt, as `ratchet optimize` does
        log(f"batch: {unrecognized}")
        status = "kept_eager" if getattr(client, "kept_eager", False) else "unrecognized"  # nothing for a kernel to do
        return {"status": status, "verdict": status, "error": _one_line(unrecognized),
                "correct": False, "attempts": 0, "model": "builtin", "precision": config.precision, "cost_usd": 0.0}
    if resume is None:
        resume = bool(spec.get("resume")) and _has_unfinished_run(problem, config, spec.get("since"))
    try:
        try:
            result = optimize(problem, config, client, resume=resume, log=log, store=store, pools=pools)
        except NothingToResume as exc:  # the run finished or vanished since we looked: start afresh
            log(f"batch: {exc}; starting a new run")
            result = optimize(problem, config, client, resume=False, log=log, store=store, pools=pools)
    except ProblemError as exc:
        return {"status": "invalid_problem", "verdict": "invalid_problem", "error": _one_line(str(exc))}
    except Fenced:
        raise  # not this run's to report: problem_row makes it a `fenced` row
    except WorkspaceError as exc:
        return {"status": "error", "verdict": "error", "error": _one_line(str(exc))}
    finally:
        close = getattr(client, "close", None)
        if close:
            close()
    s = result.summary
    best = s.get("best") or {}
    faults = sum(v == Verdict.ERROR.value for v in s["verdicts"])
    judged = [v for v in s["verdicts"] if v != Verdict.ERROR.value]
    status, error = s["status"], s["error"]
    if not best and s["verdicts"] and not judged and status == "finished":  # never judged: --resume runs it again
        status, error = "error", f"every attempt ({faults}) ended in an evaluator fault (verdict error)"
    row = {
        "status": status, "resumed": resume, "exit_code": result.exit_code, "evaluator_faults": faults,
        # ok when a correct kernel was found, else the last verdict that judged the kernel (an evaluator
        # fault judges nothing), else error (every attempt was a fault), else no_attempt
        "verdict": "ok" if best else (judged or s["verdicts"] or ["no_attempt"])[-1],
        "correct": bool(best), "timing_measured": bool(best.get("timing_measured")),
        # the best and eager both timed, the best not faster beyond noise (agent/loop/kept_eager.py): the
        # report counts the problem as 1.0x against eager; None where there is no correct kernel
        "kept_eager": bool(best.get("kept_eager")) if best else None,
        "speedup_vs_eager": best.get("speedup_vs_eager"), "speedup_vs_compile": best.get("speedup_vs_compile"),
        "roofline_fraction": best.get("roofline_fraction"), "candidate_ms": best.get("median_ms"),
        # the best's drop-in check and library mark (docs/reward.md): what the report counts apart
        "generalizes": best.get("generalizes"), "library": best.get("library"),
        "best_attempt": best.get("attempt"), "attempts": s["attempts"], "attempts_used": s["attempts_used"],
        "correct_attempts": s["correct"], "format_errors": s["format_errors"], "tokens": s["tokens_used"],
        "attempts_to_correct": next((i for i, v in enumerate(s["verdicts"], 1) if v == Verdict.OK.value), None),
        "model_calls": s["model_calls"], "agent_wall_s": s["wall_s"], "model": s["model"], "run_id": s["run_id"],
        "stop_reason": s["stop_reason"], "error": error, "workspace": s["workspace"], "best_path": s["best_path"],
        "precision": config.precision, "cost_usd": s.get("cost_usd"), "price": s.get("price"),
        "judge_s": s.get("judge_s"), "judge_share": s.get("judge_share"),
    }
    if store is None:
        row.update(_baseline_times(Path(s["workspace"]), best.get("attempt")))
    else:
        with store.open(problem) as opened:
            row.update(baseline_times(opened.repo, best.get("attempt")))
    return row


def _has_unfinished_run(problem: Path, config: Any, since: float | None) -> bool:
    """Whether the problem's workspace holds an unfinished agent run started at or after `since`."""
    from agent.loop.run_store import pointer_path
    from agent.workspace.root import Workspace, WorkspaceError

    try:
        with Workspace(config.workspace).open_existing(problem) as repo:
            path = pointer_path(repo)
    except (WorkspaceError, OSError):
        return False
    try:
        pointer = json.loads(path.read_text())
    except (OSError, ValueError):
        return False
    return unfinished_since(pointer, since)


def unfinished_since(pointer: Any, since: float | None) -> bool:
    """Whether a run pointer (agent.loop.run_store) names an unfinished run started at or after `since`
    (unix seconds; None: any time)."""
    try:
        begun = time.mktime(time.strptime(pointer["started_at"][:19], "%Y-%m-%dT%H:%M:%S"))
    except (ValueError, KeyError, TypeError):
        return False
    return not pointer.get("finished") and (since is None or begun >= math.floor(since) - 1)


def _baseline_times(workspace: Path, attempt: int | None) -> dict[str, Any]:
    """baseline_times of the problem's repository in a workspace on this machine."""
    from agent.workspace.root import Workspace, WorkspaceError

    try:
        with Workspace(workspace.parent).open_existing(workspace.name) as repo:
            return baseline_times(repo, attempt)
    except (WorkspaceError, OSError):
        return baseline_times(None, attempt)


def baseline_times(repo: Any, attempt: int | None) -> dict[str, Any]:
    """Eager and torch.compile medians and the roofline floor, from the best attempt's record
    (else the latest attempt's): what the report's chart is drawn against. None where unknown."""
    from agent.batch.channel import Fenced
    from agent.workspace.root import WorkspaceError

    out: dict[str, Any] = {"eager_ms": None, "compile_ms": None, "floor_ms": None, "trials": None,
                           "distributions": None, "heldout": None}
    try:
        chosen = (repo.attempt(attempt) if attempt else repo.latest()) if repo is not None else None
        record = repo.record(chosen) if chosen else None
    except Fenced:
        raise
    except (WorkspaceError, OSError, ValueError):
        return out
    if not record:
        return out
    for key, field in (("eager_ms", "eager_time"), ("compile_ms", "compile_time")):
        stats = record.get(field) or {}
        out[key] = stats.get("median_ms") if stats.get("measured") else None
    roofline = record.get("roofline") or {}
    out["floor_ms"] = roofline.get("floor_ms") if roofline.get("measured") else None
    if record.get("verdict") == Verdict.OK.value:  # what the correct kernel passed (a failed one's are partial)
        out["trials"] = record.get("trials")
        out["distributions"] = list(dict.fromkeys(record.get("distributions") or [])) or None
        out["heldout"] = [{"variant": h.get("variant"), "outcome": h.get("outcome")}
                          for h in record.get("heldout") or [] if isinstance(h, dict)] or None
    return out


def _complete_row(row: dict[str, Any]) -> dict[str, Any]:
    """Every row carries every field (None where unknown), so readers need no special cases."""
    for key in ("status", "verdict", "error", "resumed", "exit_code", "correct", "timing_measured", "kept_eager",
                "speedup_vs_eager", "speedup_vs_compile", "roofline_fraction", "candidate_ms", "eager_ms",
                "compile_ms", "floor_ms", "best_attempt", "attempts", "attempts_used", "correct_attempts",
                "evaluator_faults", "format_errors", "tokens", "model_calls", "agent_wall_s", "model", "run_id",
                "stop_reason", "workspace", "best_path", "device_s", "executor", "node", "warm_workers", "precision",
                "generalizes", "library", "attempts_to_correct", "trials", "distributions", "heldout", "cost_usd",
                "price", "judge_s", "judge_share"):
        row.setdefault(key, None)
    for key in ("attempts", "attempts_used", "correct_attempts", "evaluator_faults", "format_errors", "tokens",
                "model_calls"):
        row[key] = row[key] or 0
    row["correct"] = bool(row["correct"])
    row["timing_measured"] = bool(row["timing_measured"])
    return row


def crashed_row(spec: dict[str, Any], message: str, seconds: float) -> dict[str, Any]:
    """The row of a problem whose worker died without answering."""
    return _complete_row({"schema": ROW_SCHEMA, "problem": spec["key"], "path": spec["problem"],
                          "device": spec["device"], "executor": spec.get("executor") or "local",
                          "node": spec.get("node"), "status": "crashed", "verdict": "crashed",
                          "error": _one_line(message), "device_s": round(seconds, 3),
                          "finished_at": round(time.time(), 3)})


def _one_line(text: str, limit: int = 400) -> str:
    line = " ".join(str(text).split())
    return line if len(line) <= limit else line[: limit - 3] + "..."
