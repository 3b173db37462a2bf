"""Attempts as training data: rows for supervised fine-tuning (SFT) and for RL, from workspaces.

Where the data is: every problem's git repository (agent.workspace.root) holds each attempt as a
commit on main (candidate.py, result.json, trailers), and the agent saves each run's trajectory
(the whole conversation, `agent.loop.nodes.trajectory_text`) with every attempt and after every model
turn on the ref `refs/ratchet/trajectories`, whose tip holds the latest version of every run
(agent.workspace.trajectories). Workspaces written before that ref existed committed
`trajectory.json` on main; those runs are read from main's history, the latest version of each.

SFT rows (`sft_rows`), one JSON object per line:

    {"messages": [...], "tools": [...], "metadata": {...}}

`messages` are the conversation in the OpenAI chat format (system, user, assistant with
`tool_calls`, tool results), ratchet's own bookkeeping keys (`_kind`, `_usage`...) removed;
`tools` are the function schemas the model was offered. With `unit="attempt"` (the default) a
row is the conversation up to and including the assistant turn that submitted one attempt, and
its metadata is that attempt's outcome (verdict, speedups, timing measured or not, attempt
number and commit, and its tokens and dollars from the commit's trailers); rows are deduplicated by problem and source hash (the first time a source
was submitted wins); a run wider than one (docs/search.md) gives each lineage's attempts, read from the
conversation saved with each attempt. With `unit="run"` a row is a run's whole conversation (a wide
run's lead lineage), its outcome the run's best, deduplicated by problem and the run's sequence of
submitted sources. Filters:
`correct` keeps outcomes whose verdict is ok; `min_speedup` keeps outcomes timed at least that
much faster than the baseline (eager or torch.compile); an untimed outcome never passes it.

An evaluator fault (verdict error: ratchet failed, the kernel was never judged) is marked in its
outcome by `"evaluator_fault": true` and `"correct": null` (neither correct nor incorrect), so
training data can drop it; where a run evaluated the same source again after a fault, the
judged outcome is the one used.

RL rows (`rl_rows`), one per distinct problem (by problem hash):

    {"prompt": [system, user], "tools": [...], "problem": PATH, "entry": "Model", "metadata": {...}}

`prompt` is what `agent.learn.rl_env.KernelEnv.reset` gives (the agent's own system and task
messages); `problem` and `entry` are the columns `tools.reward.kernel_reward.KernelReward` reads; metadata
holds the problem hash, the reference's sha256 and source, its input shapes and dtypes, ops,
sizes, and the workspace's best so far. The problem is described by the evaluator's reference
worker (problem code never runs in this process). PATH is the original problem file when it
still holds the same reference, else the workspace's verbatim copy (`reference.py`).
"""
from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agent.loop.turns import first_line, system_text, task_text
from agent.workspace.root import MARKER, REFERENCE, ProblemRepo, Workspace, WorkspaceError
from agent.workspace.attempt import Attempt
from tools.record import Verdict
from tools.toolcalls import SUBMIT_KERNEL, Submission, parse_call, tool_schemas

MESSAGE_KEYS = ("role", "content", "tool_calls", "tool_call_id", "name")
DEFAULT_GPU = "an NVIDIA GPU"  # the agent's name for a CUDA device it cannot name


class ExportError(Exception):
    """A path that is neither a workspace root nor a problem's workspace; str() is one line."""


@dataclass
class ExportStats:
    rows: int = 0
    duplicates: int = 0
    filtered: int = 0
    skipped: list[str] = field(default_factory=list)  # "problem: why", for problems that could not be used

    def to_dict(self) -> dict[str, Any]:
        return {"rows": self.rows, "duplicates": self.duplicates, "filtered": self.filtered, "skipped": self.skipped}


# --- finding the data ----------------------------------------------------------------------------


def find_repos(paths: Iterable[str | Path]) -> list[Path]:
    """Problem repositories: each path is one (it holds ratchet.json) or a workspace root."""
    found: list[Path] = []
    for raw in paths:
        path = Path(raw)
        if not path.is_dir():
            raise ExportError(f"{path}: no such directory")
        try:
            if _is_problem_repo(path):
                found.append(path.resolve())
                continue
            names = Workspace(path).problems()
        except WorkspaceError as exc:  # a directory this user cannot read
            raise ExportError(str(exc)) from None
        if not names and not (path / ".git").exists():
            raise ExportError(f"{path}: neither a workspace root nor a problem's workspace (no {MARKER} found)")
        found.extend((path / name).resolve() for name in names)
    return list(dict.fromkeys(found))


def _is_problem_repo(path: Path) -> bool:
    from agent.workspace.repo import entries

    return ".git" in (entries(path) or ()) and MARKER in (entries(path) or ()) and entries(path / ".git") is not None


def marker(repo: Path) -> dict[str, Any]:
    try:
        return json.loads((repo / MARKER).read_text())
    except (OSError, ValueError):
        return {}


def saved_trajectories(repo: Path) -> list[dict[str, Any]]:
    """The latest saved trajectory of each run in a problem's repository, oldest run first."""
    out = []
    with ProblemRepo(repo, read_only=True) as handle:
        for saved in handle.trajectories():
            try:
                data = json.loads(saved.text)
            except ValueError:
                continue  # not JSON: nothing to train on (the agent only ever saves JSON)
            if isinstance(data, dict):
                out.append(data)
    return out


def clean_message(message: dict[str, Any], *, reasoning: bool = False) -> dict[str, Any]:
    """A message in the OpenAI chat format: ratchet's `_` keys dropped, tool calls normalized."""
    out = {k: message[k] for k in MESSAGE_KEYS if k in message and not k.startswith("_")}
    if out.get("tool_calls"):
        out["tool_calls"] = [{"id": c.get("id"), "type": "function",
                              "function": {"name": c["function"]["name"], "arguments": c["function"].get("arguments") or ""}}
                             for c in out["tool_calls"]]
    if out.get("content") is None and out.get("role") != "assistant":
        out["content"] = ""
    if reasoning and message.get("reasoning_content"):
        out["reasoning_content"] = message["reasoning_content"]
    return out


def submitted(message: dict[str, Any], auxiliary: bool = True) -> Submission | None:
    """The submission an assistant turn made: its first submit_kernel call, if well formed."""
    for call in message.get("tool_calls") or []:
        fn = call.get("function") or {}
        if fn.get("name") == SUBMIT_KERNEL:
            parsed = parse_call(SUBMIT_KERNEL, fn.get("arguments"), auxiliary=auxiliary)
            return parsed if isinstance(parsed, Submission) else None
    return None


# --- SFT -------------------------------------------------------------------------------------------


def outcome(attempt: Attempt, record: dict[str, Any]) -> dict[str, Any]:
    timing = record.get("candidate_time") or {}
    fault = record["verdict"] == Verdict.ERROR.value
    return {"attempt": attempt.number, "commit": attempt.sha, "verdict": record["verdict"],
            "correct": None if fault else record["verdict"] == Verdict.OK.value, "evaluator_fault": fault,
            "source_hash": attempt.source_sha256,
            "speedup_vs_eager": record.get("speedup_vs_eager"), "speedup_vs_compile": record.get("speedup_vs_compile"),
            "median_ms": timing.get("median_ms"), "timing_measured": bool(timing.get("measured")),
            "precision": record.get("precision"),  # the speedups' baselines (None: a record before schema 6)
            # what the attempt cost, from its trailers (agent/cost.py): None on commits made before them;
            # cost_usd None with tokens known: no price for its model
            "tokens": attempt.tokens, "cost_usd": attempt.cost_usd,
            "message": first_line(record.get("message"))}


def passes(out: dict[str, Any] | None, *, correct: bool, min_speedup: float | None, baseline: str) -> bool:
    if out is None:
        return not correct and min_speedup is None
    if correct and not out["correct"]:
        return False
    if min_speedup is not None:
        speedup = out.get("speedup_vs_eager" if baseline == "eager" else "speedup_vs_compile")
        return bool(out["correct"] and out["timing_measured"] and speedup is not None and speedup >= min_speedup)
    return True


def sft_rows(paths: Iterable[str | Path], *, correct: bool = False, min_speedup: float | None = None,
             baseline: str = "eager", unit: str = "attempt", reasoning: bool = False,
             stats: ExportStats | None = None) -> Iterator[dict[str, Any]]:
    """SFT rows from the workspaces (see the module docstring)."""
    if unit not in ("attempt", "run"):
        raise ValueError(f"unit must be 'attempt' or 'run', not {unit!r}")
    stats = stats if stats is not None else ExportStats()
    seen: set[tuple[str, str]] = set()
    for path in find_repos(paths):
        with ProblemRepo(path, read_only=True) as repo:
            attempts = repo.attempts()
            records: dict[int, dict[str, Any]] = {}

            def record_of(a: Attempt) -> dict[str, Any]:
                if a.number not in records:
                    records[a.number] = repo.record(a)
                return records[a.number]

            trajectories = saved_trajectories(path)
            if unit == "attempt":  # a wide run's other lineages (docs/search.md): each attempt's own conversation
                trajectories += _lineage_trajectories(repo, attempts, {t.get("run_id") for t in trajectories
                                                                       if t.get("lineages")})
            for traj in trajectories:
                rows = _sft_from_trajectory(path, traj, attempts, record_of, unit=unit, reasoning=reasoning)
                for key, row in rows:
                    if key in seen:
                        stats.duplicates += 1
                        continue
                    seen.add(key)
                    out = row["metadata"]["outcome"]
                    if not passes(out, correct=correct, min_speedup=min_speedup, baseline=baseline):
                        stats.filtered += 1
                        continue
                    stats.rows += 1
                    yield row


def _lineage_trajectories(repo: ProblemRepo, attempts: list[Attempt], wide: set[Any]) -> list[dict[str, Any]]:
    """The trajectory saved with each attempt of a run wider than one: its lineage's conversation up
    to that attempt. The run's own trajectory holds its lead lineage only; a lineage the beam dropped
    is found nowhere else."""
    out = []
    for a in attempts:
        text = repo.trajectory(a) if a.run_id in wide else None
        try:
            data = json.loads(text) if text else None
        except ValueError:
            continue
        if isinstance(data, dict):
            out.append(data)
    return out


def _sft_from_trajectory(path: Path, traj: dict[str, Any], attempts: list[Attempt],
                         record_of: Callable[[Attempt], dict[str, Any]], *, unit: str,
                         reasoning: bool) -> Iterator[tuple[tuple[str, str], dict[str, Any]]]:
    run_id = traj.get("run_id") or ""
    config = traj.get("config") or {}
    auxiliary = bool(config.get("auxiliary_tools", True))
    messages = traj.get("messages") or []
    problem_hash = traj.get("problem_hash") or ""
    by_hash: dict[str, Attempt] = {}  # each source's first judged attempt (a fault only if nothing judged it)
    for a in attempts:
        if a.run_id == run_id:
            known = by_hash.get(a.source_sha256)
            if known is None or (known.verdict is Verdict.ERROR and a.verdict is not Verdict.ERROR):
                by_hash[a.source_sha256] = a
    base = {"problem": traj.get("problem"), "problem_hash": problem_hash, "workspace": str(path), "run_id": run_id,
            "model": traj.get("model"), "language": traj.get("language")}
    # the tools the run offered (get_ncu_profile only where counters could be read; a trajectory
    # written before its "tools" field had no such tool)
    tools = tool_schemas(auxiliary, counters="get_ncu_profile" in (traj.get("tools") or []))
    cleaned = [clean_message(m, reasoning=reasoning) for m in messages]
    if unit == "attempt":
        for i, message in enumerate(messages):
            if message.get("role") != "assistant":
                continue
            sub = submitted(message, auxiliary)
            attempt = by_hash.get(sub.source_hash) if sub else None
            if attempt is None:
                continue  # a malformed submission, or one never committed
            row = {"messages": cleaned[: i + 1], "tools": tools,
                   "metadata": {**base, "unit": "attempt", "outcome": outcome(attempt, record_of(attempt))}}
            yield (problem_hash, sub.source_hash), row
        return
    hashes = [s.source_hash for s in (submitted(m, auxiliary) for m in messages if m.get("role") == "assistant") if s]
    runs = [by_hash[h] for h in dict.fromkeys(hashes) if h in by_hash]
    best = _best_of(runs, record_of)
    row = {"messages": cleaned, "tools": tools,
           "metadata": {**base, "unit": "run", "stop_reason": traj.get("stop_reason"),
                        "attempts": [outcome(a, record_of(a)) for a in runs],
                        "outcome": outcome(best, record_of(best)) if best else None}}
    yield (problem_hash, hashlib.sha256("\n".join(hashes).encode()).hexdigest()), row


def _best_of(attempts: list[Attempt], record_of: Callable[[Attempt], dict[str, Any]]) -> Attempt | None:
    """The run's best: correct, then the fastest measured median (the first correct if none is timed)."""
    correct = [a for a in attempts if record_of(a)["verdict"] == Verdict.OK.value]
    timed = [a for a in correct if a.timing_measured and a.median_ms is not None]
    if timed:
        return min(timed, key=lambda a: a.median_ms)
    judged = [a for a in attempts if a.verdict is not Verdict.ERROR] or attempts
    return correct[0] if correct else (judged[-1] if judged else None)


# --- RL --------------------------------------------------------------------------------------------


def rl_rows(paths: Iterable[str | Path], *, device: str | None = "cpu", gpu: str | None = None,
            language: str | None = None, max_attempts: int | None = None, auxiliary: bool | None = None,
            stats: ExportStats | None = None, log: Callable[[str], None] | None = None) -> Iterator[dict[str, Any]]:
    """RL prompt rows, one per distinct problem (see the module docstring)."""
    from tools import EvalOptions, Evaluator, ProblemError
    from tools.problem import read_problem
    from agent.learn.rl_env import EnvConfig, static_baseline

    stats = stats if stats is not None else ExportStats()
    seen: set[str] = set()
    defaults = EnvConfig()
    for path in find_repos(paths):
        info = marker(path)
        trajectories = saved_trajectories(path)
        config = (trajectories[-1].get("config") or {}) if trajectories else {}
        entry = config.get("entry") or "Model"
        problem_file = _problem_file(path, info)
        try:
            problem_hash = read_problem(problem_file, entry).hash
        except ProblemError as exc:
            stats.skipped.append(f"{path.name}: {exc}")
            continue
        if problem_hash in seen:
            stats.duplicates += 1
            continue
        seen.add(problem_hash)
        try:
            with Evaluator(problem_file, EvalOptions(device=device, trials=1, timing=False, spares=1, warm=False),
                           entry=entry) as ev:
                problem = ev.problem
        except ProblemError as exc:
            stats.skipped.append(f"{path.name}: {exc}")
            if log:
                log(f"skipped {path.name}: {exc}")
            continue
        aux = config.get("auxiliary_tools", defaults.auxiliary_tools) if auxiliary is None else auxiliary
        lang = language or config.get("language") or defaults.language
        name = Path(info.get("problem") or problem_file).name
        prompt = [
            {"role": "system", "content": system_text(problem, language=lang, gpu=gpu or config.get("gpu") or DEFAULT_GPU,
                                                      entry=entry, auxiliary=aux,
                                                      precision=config.get("precision") or "fp32")},
            {"role": "user", "content": task_text(problem, entry=entry, problem_name=name, language=lang,
                                                  baseline=static_baseline(problem),
                                                  max_attempts=max_attempts or defaults.max_attempts)},
        ]
        with ProblemRepo(path, read_only=True) as repo:
            attempts = repo.attempts()
            best = repo.best()
            best_record = repo.record(best) if best else None
        metadata = {
            "problem_hash": problem_hash, "reference_sha256": info.get("reference_sha256"), "problem_name": name,
            "original_path": info.get("problem"), "workspace": str(path), "reference_source": problem.source,
            "inputs": problem.inputs, "input_shapes": [i.get("shape") if isinstance(i, dict) else None for i in problem.inputs],
            "init_args": problem.init_args, "outputs": problem.outputs, "ops": problem.ops,
            "single_op": problem.single_op, "dtype": problem.dtype, "input_bytes": problem.input_bytes,
            "output_bytes": problem.output_bytes, "param_bytes": problem.param_bytes, "flops": problem.flops,
            "attempts": len(attempts), "correct_attempts": sum(a.ok for a in attempts),
            "evaluator_faults": sum(a.verdict is Verdict.ERROR for a in attempts),
            "best": outcome(best, best_record) if best and best_record else None,
            "language": lang, "auxiliary_tools": aux,
        }
        stats.rows += 1
        # the RL environment's tools (it does not offer get_ncu_profile: agent/learn/rl_env.py)
        yield {"prompt": prompt, "tools": tool_schemas(aux, counters=False), "problem": str(problem_file), "entry": entry,
               "metadata": metadata}


def _problem_file(repo: Path, info: dict[str, Any]) -> Path:
    """The original problem file if it still holds this reference, else the workspace's copy."""
    original = Path(info["problem"]) if info.get("problem") else None
    if original is not None and original.is_file():
        if hashlib.sha256(original.read_bytes()).hexdigest() == info.get("reference_sha256"):
            return original
    return repo / REFERENCE


def write_jsonl(rows: Iterable[dict[str, Any]], out) -> int:
    n = 0
    for row in rows:
        out.write(json.dumps(row, ensure_ascii=False) + "\n")
        n += 1
    return n
