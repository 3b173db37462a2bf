"""get_ncu_profile's budget in an agent run (agent/loop/counters.py): at most max_counter_calls
per session; on a CPU every call says why there are no counters, and starts nothing (an agent
does not offer the tool there: tests/loop/test_agent_e2e.py)."""
from __future__ import annotations

from helpers_eval import PROBLEMS, options, source
from agent.loop.counters import CounterCalls
from agent.loop.judges import Judges
from tools import Evaluator


def test_calls_past_the_budget_are_refused_and_a_cpu_evaluator_says_why(tmp_path):
    with Evaluator(PROBLEMS / "elementwise.py", options(tmp_path / "cache", trials=2, spares=0)) as ev:
        spawned = ev.spawner.spawned
        calls = CounterCalls(Judges([ev]), 2)
        for _ in range(2):
            found, why = calls(source("elementwise_ok"))
            assert why is None and found == {"available": False, "kernels": [], "seconds": 0.0,
                                             "reason": "hardware counters need a GPU; this evaluator runs on the CPU"}
        assert calls(source("elementwise_ok")) == (None, "this run's 2 get_ncu_profile calls are spent (max_counter_calls)")
        assert ev.spawner.spawned == spawned  # no worker was started for them
        assert ev.counters_unavailable() == "hardware counters need a GPU; this evaluator runs on the CPU"
    assert CounterCalls(Judges([object()]), 3)("x") == (None, "this evaluator does not read hardware counters")
