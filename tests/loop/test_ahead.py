"""Requests sent ahead (`--ahead on`, agent/loop/ahead.py): in a wide step a judged lineage's next
request goes out before the step's fan-in, while a sibling is still out, and the next step takes
its reply; a request sent for a lineage the beam then drops is counted (tokens, dollars), in no
attempt. Real CLI, real evaluator on the CPU, the scripted model on the loopback server."""
from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from agent.cli import main
from agent.workspace.root import Workspace
from helpers_agent import quiet_agent_env
from loopback import Loopback, submit

HERE = Path(__file__).parents[1]
PROBLEM = HERE / "agent_problems" / "relu_add.py"
sys.path.insert(0, str(PROBLEM.parent))
from relu_add_candidates import BROKEN, FASTER, FIXED, WRONG  # noqa: E402

pytestmark = pytest.mark.timeout(240)
SLOW_S = 8.0  # the second lineage's first reply: well after the first lineage's candidate is judged


@pytest.fixture(autouse=True)
def wide(monkeypatch):
    quiet_agent_env(monkeypatch, RATCHET_STOP_UNTIMED="0", RATCHET_PATIENCE="0")


def run(tmp_path: Path, capsys, script: list, *flags: str) -> tuple[int, dict, list, list, dict]:
    with Loopback(script) as server:
        code = main(["optimize", str(PROBLEM), "--model", "scripted", "--base-url", server.url, "--workspace",
                     str(tmp_path), "--json", "--width", "2", *flags])
        out = capsys.readouterr()
        requests = list(server.requests)
    summary = json.loads(out.out)
    with Workspace(tmp_path).open_existing(PROBLEM) as repo:
        done = repo.attempts()
        [saved] = repo.trajectories()
    return code, summary, requests, done, json.loads(saved.text)


def test_a_judged_lineage_asks_again_before_its_step_ends_and_the_next_step_takes_the_reply(tmp_path, capsys):
    # step 1: one lineage answers at once, the other after SLOW_S; both are kept (beam 2)
    script = [submit(FIXED, meet=2), submit(FIXED + "\n# other\n", meet=2, sleep_s=SLOW_S), submit(FASTER), submit(WRONG)]
    code, summary, requests, done, run_trajectory = run(tmp_path, capsys, script, "--beam", "2", "--max-attempts", "4",
                                                        "--ahead", "on")
    assert code == 0, summary
    assert len(requests) == 4 and summary["model_calls"] == 4
    # the quick lineage's next request came in before the slow one's first reply went out: sent
    # ahead of the fan-in, while a sibling of its step was still out
    assert requests[2].arrived < requests[1].answered
    assert requests[2].messages[-1]["role"] == "tool" and "Attempt 1" in requests[2].messages[-1]["content"]
    assert [a.number for a in done] == [1, 2, 3, 4] and summary["attempts_used"] == 4
    # both continuations took their replies sent ahead; each attempt answers its own lineage's last
    turns = run_trajectory["usage"]
    assert sorted(t.get("ahead", "") for t in turns) == ["", "", "used", "used"]
    first, second = done[:2], done[2:]
    assert {a.parent_attempt for a in second} == {a.number for a in first}
    assert {a.lineage for a in second} == {a.lineage for a in first}  # continued, not forked
    # the conversations saved are what was sent: the answer in each lineage is the one sent ahead
    sent = {json.dumps(r.messages[-1]["content"]) for r in requests[2:]}
    kept = {json.dumps(one["messages"][-2]["content"]) for one in run_trajectory["lineages"]}
    assert kept == sent


def test_a_request_sent_for_a_lineage_the_beam_drops_is_paid_for_and_unused(tmp_path, capsys):
    # beam 1: the broken lineage is judged first and asks ahead; the correct one, judged later,
    # takes its place in the beam, so the broken one's request sent ahead is never used
    script = [submit(BROKEN, meet=2), submit(FIXED, meet=2, sleep_s=SLOW_S), submit(WRONG), submit(FASTER)]
    code, summary, requests, done, run_trajectory = run(tmp_path, capsys, script, "--beam", "1", "--max-attempts", "3",
                                                        "--ahead", "on", "--price", "2,2")
    assert code == 0, summary
    assert len(requests) == 4 and requests[2].arrived < requests[1].answered
    assert [a.verdict.value for a in done] == ["compile_error", "ok", "ok"]  # WRONG was never judged
    turns = run_trajectory["usage"]
    assert sorted(t.get("ahead", "") for t in turns) == ["", "", "unused", "used"]
    [unused] = [t for t in turns if t.get("ahead") == "unused"]
    assert unused["turn"] == 0 and unused["tokens"] > 0
    # every request is paid for: the run's tokens and dollars count the unused one, no attempt does
    assert summary["model_calls"] == 4 and summary["tokens_used"] == sum(t["tokens"] for t in turns)
    assert summary["cost_usd"] == pytest.approx(summary["tokens_used"] * 2e-6)
    assert sum(a.cost_usd for a in done) == pytest.approx(summary["cost_usd"] - unused["cost_usd"])


def test_without_ahead_the_next_step_waits_for_the_fan_in(tmp_path, capsys):
    script = [submit(FIXED, meet=2), submit(FIXED + "\n# other\n", meet=2, sleep_s=SLOW_S), submit(FASTER), submit(WRONG)]
    code, summary, requests, done, run_trajectory = run(tmp_path, capsys, script, "--beam", "2", "--max-attempts", "4")
    assert code == 0, summary
    assert min(r.arrived for r in requests[2:]) > requests[1].answered
    assert not any("ahead" in t for t in run_trajectory["usage"])
