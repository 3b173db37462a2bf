"""A search of width N (agent/loop/beam.py) end to end on the CPU: the real CLI, graph, evaluator and
workspace, against the loopback model (whose answers wait until the branches' requests are all out,
so a sequential agent would fail) and the built-in policy; then a wide step killed half done and
resumed. Also the beam's pure parts: the fork rule, the fan-in's sums, the GPU's busy seconds."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from agent.cli import main
from agent.config import load_config
from agent.loop import beam
from agent.workspace.root import Workspace
from agent.learn.export import sft_rows
from helpers_agent import agent_env, quiet_agent_env
from loopback import Loopback, error, hold, submit

HERE = Path(__file__).parents[1]
ROOT = HERE.parent
PROBLEM = HERE / "agent_problems" / "relu_add.py"
sys.path.insert(0, str(PROBLEM.parent))
from relu_add_candidates import BROKEN, FASTER, FIXED  # noqa: E402

FIXED_TOO = FIXED + "\n# the same kernel, written again\n"
pytestmark = pytest.mark.timeout(240)


@pytest.fixture(autouse=True)
def fast_settings(monkeypatch):
    quiet_agent_env(monkeypatch, **WIDE)


WIDE = {"RATCHET_STOP_UNTIMED": "0", "RATCHET_PATIENCE": "0"}  # every attempt of the budget is spent


def env() -> dict[str, str]:
    return agent_env(**WIDE)


def attempts(workspace: Path) -> list:
    with Workspace(workspace).open_existing(PROBLEM) as repo:
        return repo.attempts()


def test_a_wide_step_asks_and_judges_its_lineages_at_once_and_the_beam_forks_the_best(tmp_path, capsys):
    # step 1: two lineages; each answer waits until both requests are out. Step 2: the beam keeps
    # the one correct lineage (width 2, beam 1) and forks it: both requests answer that attempt.
    script = [submit(BROKEN, meet=2), submit(FIXED, meet=2), submit(FASTER), submit(FIXED_TOO)]
    with Loopback(script) as server:
        code = main(["optimize", str(PROBLEM), "--model", "scripted", "--base-url", server.url, "--workspace",
                     str(tmp_path), "--json", "--width", "2", "--max-attempts", "4"])
        summary = json.loads(capsys.readouterr().out)
        requests = server.requests
    assert code == 0, summary
    assert [r.met for r in requests[:2]] == [True, True]  # the two branches' requests were out at once
    assert len({r.body["seed"] for r in requests}) == 3 and all("seed" in r.body for r in requests)  # a fork: new seed
    done = attempts(tmp_path)
    assert [a.number for a in done] == [1, 2, 3, 4] and summary["attempts_used"] == 4
    first, second = done[:2], done[2:]
    assert {a.lineage for a in first} == {0, 1} and all(a.parent_attempt is None for a in first)
    [kept] = [a for a in first if a.ok]
    assert all(a.parent_attempt == kept.number for a in second)  # both answered the one kept
    assert {a.lineage for a in second} == {kept.lineage, 2}  # one continues it, one forks it
    assert requests[2].messages == requests[3].messages  # the fork's conversation is a copy
    assert requests[2].messages[-1]["role"] == "tool" and f"Attempt {kept.number}" in requests[2].messages[-1]["content"]
    assert sorted(summary["verdicts"]) == sorted(a.verdict.value for a in done)
    assert summary["best"]["attempt"] in {a.number for a in second if a.ok} | {kept.number}

    assert main(["log", str(PROBLEM), "--workspace", str(tmp_path), "--tree"]) == 0
    tree = capsys.readouterr().out.splitlines()
    assert tree[0].endswith("4 attempt(s), 3 lineage(s)")
    at = next(i for i, line in enumerate(tree) if line.lstrip("*").startswith(f"{kept.number} ok"))
    assert tree[at + 1].startswith("├── ") and tree[at + 2].startswith("└── ")
    with Workspace(tmp_path).open_existing(PROBLEM) as repo:
        [saved] = repo.trajectories()
        run = json.loads(saved.text)
        own = json.loads(repo.trajectory(second[0]))
    assert run["schema"] == 3 and [one["id"] for one in run["lineages"]] and len(run["lineages"]) == 2
    assert own["lineage"] == second[0].lineage  # an attempt's own trajectory is its lineage's conversation
    # SFT export: every attempt of every lineage, read from the conversation saved with each attempt
    rows = list(sft_rows([tmp_path]))
    assert sorted(r["metadata"]["outcome"]["attempt"] for r in rows) == [1, 2, 3, 4]


def test_a_model_error_in_one_branch_keeps_what_the_other_committed(tmp_path, capsys):
    with Loopback([submit(FIXED), error(400, "scripted refusal")]) as server:
        code = main(["optimize", str(PROBLEM), "--model", "scripted", "--base-url", server.url, "--workspace",
                     str(tmp_path), "--json", "--width", "2", "--max-attempts", "4"])
        summary = json.loads(capsys.readouterr().out)
    assert code == 11 and summary["status"] == "model_error"  # refused: the run stops, to be resumed
    assert summary["attempts"] == 1 and summary["verdicts"] == ["ok"] and summary["best"]["attempt"] == 1
    assert [a.verdict.value for a in attempts(tmp_path)] == ["ok"]


def test_the_builtin_policy_judges_width_configurations_in_one_step(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("RATCHET_STOP_UNTIMED", "1")  # on the CPU the step's first correct kernel ends the run
    code = main(["optimize", str(PROBLEM), "--workspace", str(tmp_path), "--json", "--width", "3"])
    summary = json.loads(capsys.readouterr().out)
    assert code == 0, summary
    done = attempts(tmp_path)
    assert len(done) == 3 and {a.lineage for a in done} == {0, 1, 2}  # one step: three lineages
    assert len({a.source_sha256 for a in done}) == 3  # three configurations, none twice
    assert all(a.parent_attempt is None for a in done) and "first correct kernel" in summary["stop_reason"]


RATCHET = [sys.executable, "-c", "import signal, sys; signal.signal(signal.SIGINT, signal.default_int_handler); "
           "from agent.cli import main; sys.exit(main())"]


def test_a_wide_step_killed_half_done_resumes_only_its_unfinished_branch(tmp_path):
    # step 1: one branch is answered and committed while the other's request is held; kill then
    script = [submit(FIXED), hold(), submit(FASTER)]
    with Loopback(script) as server:
        args = [*RATCHET, "optimize", str(PROBLEM), "--model", "scripted", "--base-url", server.url, "--workspace",
                str(tmp_path), "--json", "--width", "2", "--max-attempts", "2"]
        proc = subprocess.Popen(args, cwd=ROOT, env={**os.environ, **env(), "PYTHONPATH": str(ROOT)},
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        deadline = time.monotonic() + 180
        while (not server.held.is_set() or not attempts_if_any(tmp_path)) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert server.held.is_set() and [a.number for a in attempts(tmp_path)] == [1], proc.stderr
        time.sleep(1.0)  # the finished branch's report reaches the checkpoint (durability "sync")
        proc.send_signal(signal.SIGKILL)
        proc.communicate(timeout=60)
        server.release()
        resumed = subprocess.run([*args, "--resume"], cwd=ROOT, env={**os.environ, **env(), "PYTHONPATH": str(ROOT)},
                                 capture_output=True, text=True, timeout=180)
        requests = server.requests
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    done = attempts(tmp_path)
    assert [a.number for a in done] == [1, 2] and len({a.source_sha256 for a in done}) == 2  # none repeated
    assert {a.lineage for a in done} == {0, 1}
    assert len(requests) == 3 and requests[2].messages == requests[1].messages  # only the held request, once more
    assert json.loads(resumed.stdout)["attempts_used"] == 2


def attempts_if_any(workspace: Path) -> list:
    try:
        return attempts(workspace)
    except Exception:  # noqa: BLE001 - the workspace may not exist yet, or be mid-commit
        return []


# --- the beam's pure parts -----------------------------------------------------------------------


def summary(n: int, verdict: str = "ok", median: float | None = None) -> dict:
    return {"attempt": n, "sha": "x", "source_hash": str(n), "verdict": verdict, "speedup_vs_eager": None,
            "speedup_vs_compile": None, "median_ms": median, "roofline_fraction": None, "is_best": False,
            "reused": False, "repeat": False, "ci_low_ms": median, "ci_high_ms": median,
            "timing_measured": median is not None, "detail": ""}


def lineage(k: int, latest: dict | None) -> dict:
    one = beam.lineage(k, [{"role": "user", "content": "task"}], run_id="r", width=4, parent=None)
    return {**one, "latest": latest}


def test_the_beam_keeps_the_best_and_forks_them_round_robin():
    config = load_config({"width": 4, "beam": 2, "max_attempts": 10}, env={})
    ranked = sorted([lineage(0, summary(1, "incorrect")), lineage(1, summary(2, median=2.0)),
                     lineage(2, summary(3, median=1.0)), lineage(3, None)], key=beam.rank)
    assert [one["id"] for one in ranked] == [2, 1, 0, 3]
    state = {"run_id": "r", "attempts_used": 4, "lineages": ranked, "next_lineage": 4}
    out = beam.next_lineages(state, config, lambda view: {"role": "tool", "content": f"on {view['latest']['attempt']}"})
    assert [(one["id"], one["parent"]) for one in out["lineages"]] == [(2, 3), (1, 2), (4, 3), (5, 2)]
    assert [one["messages"][-1]["content"] for one in out["lineages"]] == ["on 3", "on 2", "on 3", "on 2"]
    assert out["next_lineage"] == 6
    # what is left of the attempt budget bounds the width; half the width is the default beam
    config = load_config({"width": 4, "max_attempts": 5}, env={})
    assert beam.kept(config) == 2 and len(beam.next_lineages(state, config, lambda v: {})["lineages"]) == 1


def test_the_fan_in_sums_the_branches_and_moves_the_best_by_the_noise_rule():
    base = {"usage": [{"turn": 1}], "attempts": [summary(1, median=1.0)], "best": summary(1, median=1.0),
            "attempts_used": 1, "format_errors": 0, "tokens_used": 10, "judge_s": 1.0, "billed_turns": 1,
            "baseline": {"eager_ms": 2.0}}
    reports = [
        {"lineage": lineage(0, summary(2, median=0.5)), "usage": [{"turn": 2}], "attempts": [summary(2, median=0.5)],
         "attempts_used": 1, "format_errors": 0, "tokens_used": 5, "best": summary(2, median=0.5),
         "baseline": {"eager_ms": 2.1}, "judged": [10.0, 12.0], "billed": True},
        {"lineage": lineage(1, None), "usage": [{"turn": 2}], "attempts": [], "attempts_used": 1, "format_errors": 1,
         "tokens_used": 7, "best": base["best"], "baseline": None, "judged": None, "billed": False},
    ]
    out = beam.select({**base, "branches": reports})
    assert out["best"]["attempt"] == 2 and out["improved"] and out["attempts_used"] == 3 and out["format_errors"] == 1
    assert out["tokens_used"] == 22 and len(out["usage"]) == 3 and out["billed_turns"] == 3
    assert out["judge_s"] == 3.0 and out["baseline"]["eager_ms"] == 2.1 and out["step_size"] == 2
    assert out["latest"]["attempt"] == 2 and out["branches"] is None  # the lead is the best; the fan-in emptied
    assert [one["improved"] for one in out["lineages"]] == [True, False]


def test_the_fan_in_moves_the_best_in_commit_order_and_counts_a_shared_attempt_once():
    # 3 is faster than 2 but within noise of it (the noise rule is not transitive): the workspace kept
    # 2, committed first, as 3 could not beat it; ranked by median, 3 would have come first and stayed
    two, three = {**summary(2, median=1.0), "ci_low_ms": 0.9, "ci_high_ms": 1.1}, {**summary(3, median=0.95), "ci_low_ms": 0.6, "ci_high_ms": 1.3}

    def report(k: int, latest: dict, new: list) -> dict:
        return {"lineage": lineage(k, latest), "usage": [], "attempts": new, "attempts_used": 1, "format_errors": 0,
                "tokens_used": 0, "best": latest, "baseline": None, "judged": None, "billed": True}

    base = {"usage": [], "attempts": [], "best": None, "attempts_used": 0, "format_errors": 0, "tokens_used": 0,
            "judge_s": 0.0, "billed_turns": 0, "baseline": {}}
    out = beam.select({**base, "branches": [report(0, three, [three]), report(1, two, [two]),
                                            report(3, two, [two])]})  # lineage 3 sent 2's source again: reused
    assert out["best"]["attempt"] == 2 and [a["attempt"] for a in out["attempts"]] == [2, 3]
    assert [(one["id"], one["improved"]) for one in out["lineages"]] == [(0, False), (1, True), (3, True)]


def test_busy_seconds_count_overlapping_evaluations_once():
    assert beam.busy_seconds([[0.0, 2.0], [1.0, 3.0], [5.0, 6.0], [5.5, 5.7]]) == 4.0
    assert beam.busy_seconds([]) == 0.0


def test_a_run_saved_by_the_graph_before_the_fan_out_is_not_resumed_silently(tmp_path, capsys):
    """A run killed under the single-line graph (next node `compile`) and resumed by this one used to
    end at once with nothing done and its pointer left unfinished; --resume now says why (exit 2)."""
    from langgraph.graph import END, START, StateGraph

    from agent.loop.run_store import LocalStore
    from agent.loop.state import AgentState

    def killed(state: AgentState) -> dict:
        raise RuntimeError("killed mid-evaluation")

    with LocalStore(tmp_path).open(PROBLEM) as opened:
        old = StateGraph(AgentState)
        old.add_node("draft", lambda state: {"attempts_used": 0})
        old.add_node("compile", killed)
        old.add_edge(START, "draft")
        old.add_edge("draft", "compile")
        old.add_edge("compile", END)
        with pytest.raises(RuntimeError):
            old.compile(checkpointer=opened.saver()).invoke({"run_id": "old-run"}, {"configurable": {"thread_id": "old-run"}})
        opened.write_pointer({"run_id": "old-run", "problem": str(PROBLEM), "finished": False})
    code = main(["optimize", str(PROBLEM), "--workspace", str(tmp_path), "--resume"])
    err = capsys.readouterr().err
    assert code == 2 and "saved by an older ratchet, at node compile" in err, err
