"""`ratchet export`: a real (scripted) agent run on the CPU, then its attempts as SFT and RL rows."""
from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from agent.cli import main
from agent.learn.export import clean_message, saved_trajectories
from agent.learn.rl_env import EnvConfig, KernelEnv
from agent.workspace.root import Workspace
from helpers_agent import quiet_agent_env
from loopback import Loopback, submit
from tools.reward import RewardConfig
from tools.toolcalls import tool_schemas

HERE = Path(__file__).parents[1]
PROBLEM = HERE / "rl_problems" / "scale_add.py"
sys.path.insert(0, str(PROBLEM.parent))
from scale_add_candidates import CHEAT_GUARD, FAST, SLOW, WRONG  # noqa: E402

pytestmark = pytest.mark.timeout(240)


@pytest.fixture(scope="module")
def workspace(tmp_path_factory):
    """Two scripted runs on one problem; the second repeats a source of the first."""
    mp = pytest.MonkeyPatch()
    quiet_agent_env(mp, RATCHET_TRIALS="1", RATCHET_RETRY_ATTEMPTS="2",
                    RATCHET_STOP_UNTIMED="0")  # runs go on past the first correct kernel, as on a GPU
    root = tmp_path_factory.mktemp("ws")
    try:
        for script in ([submit(WRONG, reasoning="first try"), submit(FAST), submit(SLOW)], [submit(FAST), submit(CHEAT_GUARD)]):
            with Loopback(script) as server:
                code = main(["optimize", str(PROBLEM), "--model", "scripted", "--base-url", server.url,
                             "--workspace", str(root), "--max-attempts", str(len(script)), "--json"])
            assert code == 0
    finally:
        mp.undo()
    return root


def export(capsys, *args: str) -> tuple[list[dict], dict]:
    capsys.readouterr()
    assert main(["export", *args]) == 0
    out = capsys.readouterr().out
    summary = json.loads(out.splitlines()[-1])
    rows = [json.loads(line) for line in Path(summary["out"]).read_text().splitlines()]
    assert summary["rows"] == len(rows)
    return rows, summary


def test_sft_rows_match_the_workspace(workspace, tmp_path, capsys):
    out = tmp_path / "sft.jsonl"
    rows, summary = export(capsys, str(workspace), "--format", "sft", "--out", str(out))
    # four distinct sources were submitted (FAST twice, in two runs): one row each
    assert len(rows) == 4 and summary["duplicates"] == 1 and summary["filtered"] == 0
    with Workspace(workspace).open_existing(PROBLEM) as repo:
        attempts = {a.number: a for a in repo.attempts()}
        trajectories = saved_trajectories(repo.path)
        assert len(trajectories) == 2
        for row in rows:
            meta, messages = row["metadata"], row["messages"]
            assert row["tools"] == tool_schemas(True, counters=False)  # the run's: no counters on a CPU
            assert [m["role"] for m in messages[:2]] == ["system", "user"] and messages[-1]["role"] == "assistant"
            assert not any(k.startswith("_") for m in messages for k in m)
            call = messages[-1]["tool_calls"][0]["function"]
            source = json.loads(call["arguments"])["source"]
            attempt = attempts[meta["outcome"]["attempt"]]
            # the row's last submission is that attempt's committed source, with its verdict
            assert repo.source(attempt) == source
            assert hashlib.sha256(source.encode()).hexdigest() == meta["outcome"]["source_hash"] == attempt.source_sha256
            assert meta["outcome"]["verdict"] == attempt.verdict.value == repo.record(attempt)["verdict"]
            assert meta["run_id"] == attempt.run_id and meta["problem_hash"] == repo.record(attempt)["problem_hash"]
            # the conversation is the saved trajectory's, up to that turn
            traj = next(t for t in trajectories if t["run_id"] == meta["run_id"])
            assert messages == [clean_message(m) for m in traj["messages"][: len(messages)]]
    verdicts = sorted(r["metadata"]["outcome"]["verdict"] for r in rows)
    assert verdicts == ["incorrect", "ok", "ok", "rejected"]
    first = next(r for r in rows if r["metadata"]["outcome"]["verdict"] == "incorrect")
    assert len(first["messages"]) == 3 and "reasoning_content" not in first["messages"][-1]


def test_sft_filters_units_and_reasoning(workspace, tmp_path, capsys):
    out = str(tmp_path / "rows.jsonl")
    rows, summary = export(capsys, str(workspace), "--correct", "--out", out)
    assert len(rows) == 2 and summary["filtered"] == 2 and all(r["metadata"]["outcome"]["correct"] for r in rows)
    rows, summary = export(capsys, str(workspace), "--min-speedup", "1.0", "--out", out)
    assert rows == [] and summary["filtered"] == 4  # nothing is timed on the CPU
    rows, _ = export(capsys, str(workspace / "scale_add"), "--unit", "run", "--reasoning", "--out", out)
    assert len(rows) == 2 and [len(r["metadata"]["attempts"]) for r in rows] == [3, 2]
    assert rows[0]["metadata"]["outcome"]["verdict"] == "ok" and rows[0]["messages"][2]["reasoning_content"] == "first try"
    code = main(["export", str(tmp_path / "nowhere"), "--out", out])
    assert code == 2 and "no such directory" in capsys.readouterr().err


def test_rl_rows_are_the_environments_prompts(workspace, tmp_path, capsys):
    copy = tmp_path / "copy" / "scale_add"
    shutil.copytree(workspace / "scale_add", copy)  # another workspace of the same problem
    rows, summary = export(capsys, str(workspace), str(workspace / "scale_add"), str(copy.parent), "--format", "rl",
                           "--out", str(tmp_path / "rl.jsonl"), "--gpu", "an H100")
    assert len(rows) == 1 and summary["duplicates"] == 1  # one row per problem
    row = rows[0]
    meta = row["metadata"]
    assert Path(row["problem"]) == PROBLEM.resolve() and row["entry"] == "Model" and row["tools"] == tool_schemas(True, counters=False)
    assert meta["input_shapes"] == [[1024], [1024]] and meta["reference_source"] == PROBLEM.read_text()
    assert meta["attempts"] == 5 and meta["correct_attempts"] == 3 and meta["best"]["verdict"] == "ok"
    with KernelEnv(EnvConfig(gpu="an H100"), RewardConfig(device="cpu", trials=1, spares=1)) as env:
        messages, tools = env.reset(row["problem"])
    assert row["prompt"] == messages and row["tools"] == tools


def test_an_evaluator_fault_is_marked_for_dropping(tmp_path, capsys):
    """A run whose attempts 1 and 3 were evaluator faults (records built with verdict error) and
    whose attempt 2 resubmitted attempt 1's source and was judged: the fault row says so
    (`evaluator_fault`, `correct` null), and the resubmitted source carries its judged outcome."""
    from tools.record import Result, Verdict

    def call(i: int, source: str) -> dict:
        return {"role": "assistant", "content": None, "tool_calls": [
            {"id": f"c{i}", "type": "function", "function": {"name": "submit_kernel", "arguments": json.dumps({"source": source})}}]}

    fault = Result(verdict=Verdict.ERROR, message="ratchet's evaluator failed (ReferenceLost: died twice)")
    messages = [{"role": "system", "content": "s"}, {"role": "user", "content": "u"},
                call(1, FAST), {"role": "tool", "tool_call_id": "c1", "content": "Attempt 1: not judged"},
                call(2, FAST), {"role": "tool", "tool_call_id": "c2", "content": "Attempt 2: correct"},
                call(3, WRONG), {"role": "tool", "tool_call_id": "c3", "content": "Attempt 3: not judged"}]
    trajectory = json.dumps({"schema": 1, "run_id": "run-1", "problem": str(PROBLEM), "problem_hash": "h", "model": "m",
                             "language": "triton", "config": {"auxiliary_tools": True}, "messages": messages})
    root = tmp_path / "ws"
    with Workspace(root).open_problem(PROBLEM) as repo:
        for source, result in ((FAST, fault), (FAST, Result(verdict=Verdict.OK, message="Correct on 1 trial")), (WRONG, fault)):
            repo.commit_attempt(source, result, model="m", run_id="run-1", extra_files={"trajectory.json": trajectory})
    rows, summary = export(capsys, str(root), "--out", str(tmp_path / "sft.jsonl"))
    assert summary["duplicates"] == 1 and len(rows) == 2  # FAST submitted twice: one row, its judged outcome
    fast, wrong = (r["metadata"]["outcome"] for r in rows)
    assert (fast["attempt"], fast["verdict"], fast["correct"], fast["evaluator_fault"]) == (2, "ok", True, False)
    assert (wrong["attempt"], wrong["verdict"], wrong["correct"], wrong["evaluator_fault"]) == (3, "error", None, True)
    rows, summary = export(capsys, str(root), "--correct", "--out", str(tmp_path / "ok.jsonl"))
    assert [r["metadata"]["outcome"]["attempt"] for r in rows] == [2] and summary["filtered"] == 1
    rows, _ = export(capsys, str(root), "--unit", "run", "--out", str(tmp_path / "run.jsonl"))
    assert rows[0]["metadata"]["outcome"]["attempt"] == 2
    assert [a["evaluator_fault"] for a in rows[0]["metadata"]["attempts"]] == [False, True]
    rows, _ = export(capsys, str(root), "--format", "rl", "--out", str(tmp_path / "rl.jsonl"))
    meta = rows[0]["metadata"]
    assert (meta["attempts"], meta["correct_attempts"], meta["evaluator_faults"]) == (3, 1, 2)
    assert meta["best"]["attempt"] == 2 and meta["best"]["evaluator_fault"] is False


def _conversation(run_id: str, sources: list[str], *, end: str | None = None) -> str:
    messages = [{"role": "system", "content": "s"}, {"role": "user", "content": "u"}]
    for i, source in enumerate(sources, start=1):
        messages += [{"role": "assistant", "content": None, "tool_calls": [
            {"id": f"{run_id}-{i}", "type": "function",
             "function": {"name": "submit_kernel", "arguments": json.dumps({"source": source})}}]},
            {"role": "tool", "tool_call_id": f"{run_id}-{i}", "content": f"Attempt {i}"}]
    return json.dumps({"schema": 1, "run_id": run_id, "problem": str(PROBLEM), "problem_hash": "h", "model": "m",
                       "language": "triton", "config": {"auxiliary_tools": True}, "messages": messages,
                       "stop_reason": end}) + "\n"


def test_export_reads_old_workspaces_with_trajectory_commits_on_main(tmp_path, capsys):
    """A workspace as ratchet wrote it before refs/ratchet/trajectories (trajectory.json committed
    with each attempt and alone, as `trajectory` commits of kind files, on main), then upgraded:
    a new run saves on the ref. Export reads both runs, each at its latest save, oldest run first."""
    from tools.record import Result, Verdict

    ok = Result(verdict=Verdict.OK, message="Correct on 1 trial")
    root = tmp_path / "ws"
    with Workspace(root).open_problem(PROBLEM) as repo:
        # the old agent: the attempt commit carried trajectory.json, and a commit of its own followed
        repo.commit_attempt(SLOW, ok, model="m", run_id="old-run", extra_files={"trajectory.json": _conversation("old-run", [SLOW])})
        (repo.path / "trajectory.json").write_text(_conversation("old-run", [SLOW], end="attempt budget spent"))
        git = ["git", "-C", str(repo.path), "-c", "user.name=ratchet", "-c", "user.email=ratchet@localhost"]
        subprocess.run([*git, "add", "trajectory.json"], check=True)
        subprocess.run([*git, "commit", "-q", "-m", "trajectory", "-m", "Ratchet-Kind: files"], check=True)
        assert repo.trajectories()[0].text == _conversation("old-run", [SLOW], end="attempt budget spent")
    with Workspace(root).open_problem(PROBLEM) as repo:  # this version, on the old workspace
        att = repo.commit_attempt(FAST, ok, model="m", run_id="new-run", trajectory=_conversation("new-run", [FAST]))
        repo.save_trajectory("new-run", _conversation("new-run", [FAST], end="patience"))
        assert json.loads(repo.trajectory(att))["stop_reason"] is None  # as of its attempt
        assert repo.trajectory(repo.attempt(1)) == _conversation("old-run", [SLOW])  # an old attempt's, from its commit
    trajectories = saved_trajectories(root / "scale_add")
    assert [(t["run_id"], t["stop_reason"]) for t in trajectories] == [("old-run", "attempt budget spent"),
                                                                      ("new-run", "patience")]
    rows, summary = export(capsys, str(root), "--out", str(tmp_path / "sft.jsonl"))
    assert [(r["metadata"]["run_id"], r["metadata"]["outcome"]["attempt"]) for r in rows] == [("old-run", 1), ("new-run", 2)]
    rows, _ = export(capsys, str(root), "--unit", "run", "--out", str(tmp_path / "runs.jsonl"))
    assert [r["metadata"]["stop_reason"] for r in rows] == ["attempt budget spent", "patience"]


def test_a_run_saved_in_both_places_reads_its_newer_copy(tmp_path):
    """A run begun by an older version and resumed by this one: the ref's copy is the later one."""
    from tools.record import Result, Verdict

    root = tmp_path / "ws"
    with Workspace(root).open_problem(PROBLEM) as repo:
        repo.commit_attempt(SLOW, Result(verdict=Verdict.OK, message="Correct"), model="m", run_id="r",
                            extra_files={"trajectory.json": _conversation("r", [SLOW])})
        repo.save_trajectory("r", _conversation("r", [SLOW, FAST], end="done"))
        [saved] = repo.trajectories()
        assert json.loads(saved.text)["stop_reason"] == "done"
