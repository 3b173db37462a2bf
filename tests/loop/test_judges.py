"""The evaluators a run judges on (agent/loop/judges.py): one candidate at a time on each, several at
once over several; a source two branches send judged once. Then a wide step judged over two CPU
evaluators end to end (`--device cpu,cpu`)."""
from __future__ import annotations

import json
import sys
import threading
from pathlib import Path

import pytest

from agent.cli import main
from agent.loop.judges import Judges
from agent.workspace.root import Workspace
from helpers_agent import quiet_agent_env
from loopback import Loopback, submit

HERE = Path(__file__).parents[1]
PROBLEM = HERE / "agent_problems" / "relu_add.py"
pytestmark = pytest.mark.timeout(240)


def test_each_evaluator_judges_one_candidate_at_a_time_and_two_at_once_over_two():
    judges = Judges(["card0", "card1"])
    with judges.take() as first, judges.take() as second:  # two at once: no wait
        assert {first, second} == {"card0", "card1"}
        waiting, got = threading.Event(), []

        def third() -> None:
            waiting.set()
            with judges.take() as ev:
                got.append(ev)

        thread = threading.Thread(target=third)
        thread.start()
        waiting.wait(5)
        thread.join(0.2)
        assert thread.is_alive() and not got  # a third waits for a free one
    thread.join(5)
    assert got and got[0] in {"card0", "card1"}


def test_a_source_two_branches_send_is_judged_by_the_first_and_waited_for_by_the_second():
    judges = Judges(["card0", "card1"])
    order: list[str] = []
    with judges.claim("abc") as mine:
        assert mine

        def second() -> None:
            with judges.claim("abc") as theirs:
                order.append(f"second {theirs}")

        thread = threading.Thread(target=second)
        thread.start()
        thread.join(0.2)
        order.append("first done")
    thread.join(5)
    assert order == ["first done", "second False"]
    with judges.claim("abc") as again:  # claims end with their judging
        assert again


def test_a_wide_step_is_judged_over_two_devices(tmp_path, capsys, monkeypatch):
    quiet_agent_env(monkeypatch, RATCHET_STOP_UNTIMED="0", RATCHET_PATIENCE="0")
    sys.path.insert(0, str(PROBLEM.parent))
    from relu_add_candidates import BROKEN, FIXED

    with Loopback([submit(BROKEN, meet=2), submit(FIXED, meet=2)]) as server:
        code = main(["optimize", str(PROBLEM), "--model", "scripted", "--base-url", server.url, "--workspace",
                     str(tmp_path), "--json", "--width", "2", "--max-attempts", "2", "--device", "cpu,cpu"])
        summary = json.loads(capsys.readouterr().out)
    assert code == 0, summary
    with Workspace(tmp_path).open_existing(PROBLEM) as repo:
        done = repo.attempts()
    assert sorted(a.ok for a in done) == [False, True] and summary["attempts"] == 2  # BROKEN and FIXED, each judged
