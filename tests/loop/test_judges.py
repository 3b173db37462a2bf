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
    for _ in range(3):  # one at a time: always the first device (consecutive attempts compare on one card)
        with judges.take() as only:
            assert only == "card0"
    with judges.take() as first, judges.take() as second:  # two at once: no wait
        assert (first, second) == ("card0", "card1")
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
    assert got == ["card0"]


def test_a_source_is_held_by_one_caller_at_a_time_and_every_waiter_takes_it_in_turn():
    """A source two branches send: the second checks for the first's commit only once the first is
    done; if that judging failed, waiters judge it again one at a time, never all at once."""
    judges = Judges(["card0", "card1"])
    inside, most, order = [0], [0], []
    lock = threading.Lock()

    def branch(name: str) -> None:
        with judges.claim("abc"):
            with lock:
                inside[0] += 1
                most[0] = max(most[0], inside[0])
            order.append(name)
            threading.Event().wait(0.05)
            with lock:
                inside[0] -= 1

    threads = [threading.Thread(target=branch, args=(f"b{i}",)) for i in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(5)
    assert sorted(order) == ["b0", "b1", "b2"] and most[0] == 1
    with judges.claim("abc"), judges.claim("other"):  # claims end with their blocks; sources are separate
        pass


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
