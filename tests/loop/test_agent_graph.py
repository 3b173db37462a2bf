"""The graph's wiring and the decide node's budgets and early-stopping rules."""
from __future__ import annotations

import pytest
from langgraph.runtime import Runtime

from agent.loop import nodes
from agent.loop.session import Session
from agent.config import load_config
from agent.loop.graph import compile_graph
from agent.loop.state import initial_state


def test_wiring_reads_like_the_diagram():
    graph = compile_graph().get_graph(xray=1)
    edges = {(e.source, e.target, e.conditional) for e in graph.edges}
    assert edges == {
        # the run: a fan-out (draft, refine: one branch per lineage), a fan-in (select)
        ("__start__", "draft", False), ("draft", "candidate:ask", True),
        ("candidate:report", "select", False),
        ("select", "decide", True), ("select", "stop_untimed", True), ("stop_untimed", "__end__", False),
        ("decide", "refine", True), ("decide", "__end__", True),
        ("refine", "candidate:ask", True),
        # one lineage's candidate: a build failure or a wrong result goes straight to its report
        ("candidate:ask", "candidate:compile", False),
        ("candidate:compile", "candidate:test", True), ("candidate:compile", "candidate:report", True),
        ("candidate:test", "candidate:profile", True), ("candidate:test", "candidate:report", True),
        ("candidate:profile", "candidate:report", False),
    }


def summary(n: int, *, verdict="ok", roofline=None, median=None) -> dict:
    return {"attempt": n, "sha": "x", "source_hash": str(n), "verdict": verdict, "speedup_vs_eager": None,
            "speedup_vs_compile": None, "median_ms": median, "roofline_fraction": roofline, "is_best": False,
            "reused": False, "repeat": False, "ci_low_ms": median, "ci_high_ms": median,
            "timing_measured": median is not None, "detail": ""}


def context(logs: list[str] | None = None, **settings) -> Session:
    config = load_config({"max_attempts": 10, "max_tokens": 1000, "max_wall_s": 100.0, "patience": 3,
                          "roofline_target": 0.8, **settings}, env={})
    log = logs.append if logs is not None else (lambda _: None)
    return Session(config=config, model=None, evaluator=None, repo=None, tools=[], gpu="", log=log)


EAGER_2MS = {**nodes.empty_baseline(), "eager_ms": 2.0, "eager_ci_low_ms": 1.98, "measured": True}


def base_state() -> dict:
    return initial_state(run_id="r", problem="p.py", problem_hash="h", entry="Model", language="triton", model="m",
                         workspace="w", baseline=nodes.empty_baseline())


def decide(state: dict, **settings) -> dict:
    return nodes.decide({**base_state(), **state}, Runtime(context=context(**settings)))


@pytest.mark.parametrize("state, reason", [
    ({"attempts_used": 3}, None),
    ({"attempts_used": 10}, "attempt budget spent"),
    ({"attempts_used": 1, "tokens_used": 1000}, "token budget spent"),
    ({"attempts_used": 1, "wall_s": 100.0}, "wall-time budget spent"),
    ({"attempts_used": 1, "best": summary(1, roofline=0.85, median=1.0), "baseline": EAGER_2MS}, "of the roofline floor"),
    ({"attempts_used": 1, "best": summary(1, roofline=0.5, median=1.0), "baseline": EAGER_2MS}, None),
    ({"attempts_used": 4, "since_improvement": 2}, "no improvement in 3 attempts"),
    ({"attempts_used": 4, "since_improvement": 2, "improved": True}, None),
])
def test_decide_stops_at_the_first_spent_budget(state, reason):
    out = decide(state)
    if reason is None:
        assert out["stop_reason"] is None and nodes.after_decide({**state, **out}) == "refine"
    else:
        assert reason in out["stop_reason"] and nodes.after_decide(out) == "finish"


@pytest.mark.parametrize("bound, fraction, eager_ms, stops", [
    ("memory", 0.82, 2.0, True),    # memory-bound: its own target (0.8)
    ("memory", 0.78, 2.0, False),
    ("compute", 0.82, 2.0, False),  # compute-bound: roofline_target (0.85 here)
    ("compute", 0.86, 2.0, True),
    (None, 0.82, 2.0, False),       # bound unknown (a record before schema 5): roofline_target
    ("memory", 0.95, 1.0, False),   # not faster than eager beyond noise: never stops on the roofline
    ("memory", 0.95, None, False),  # eager not measured: nothing says the best beat it
])
def test_the_roofline_stop_takes_the_problems_bound_and_needs_eager_beaten(bound, fraction, eager_ms, stops):
    baseline = {**nodes.empty_baseline(), "bound": bound, "eager_ms": eager_ms,
                "eager_ci_low_ms": eager_ms * 0.99 if eager_ms else None, "measured": eager_ms is not None}
    out = decide({"attempts_used": 1, "best": summary(1, roofline=fraction, median=1.0), "baseline": baseline},
                 roofline_target=0.85, memory_roofline_target=0.8)
    if stops:
        target = "80%" if bound == "memory" else "85%"
        assert out["stop_reason"] == f"best reached {fraction:.0%} of the roofline floor (target {target})"
    else:
        assert out["stop_reason"] is None


@pytest.mark.parametrize("fraction", [0.5, 1.0, 1.3])  # a fused kernel can read and write faster than the floor's copy
def test_a_roofline_target_of_zero_never_stops(fraction):
    baseline = {**nodes.empty_baseline(), "bound": "memory", "eager_ms": 2.0, "eager_ci_low_ms": 1.98, "measured": True}
    out = decide({"attempts_used": 1, "best": summary(1, roofline=fraction, median=1.0), "baseline": baseline},
                 roofline_target=0, memory_roofline_target=0)
    assert out["stop_reason"] is None


def test_profile_keeps_the_problems_bound_and_eagers_interval():
    record = {"verdict": "ok", "candidate_time": {"measured": True},
              "eager_time": {"measured": True, "median_ms": 2.0, "ci_low_ms": 1.9}, "compile_time": {"measured": False},
              "roofline": {"measured": True, "floor_ms": 0.1, "bound": "memory"}}
    out = nodes.profile({"record": record, "latest": summary(1, median=1.0), "phases": {}, "best": None},
                        Runtime(context=None))
    assert out["baseline"]["bound"] == "memory" and out["baseline"]["eager_ci_low_ms"] == 1.9


def test_improvement_resets_patience_and_zero_patience_never_stops():
    assert decide({"attempts_used": 2, "since_improvement": 5, "improved": True})["since_improvement"] == 0
    assert decide({"attempts_used": 2, "since_improvement": 50}, patience=0)["stop_reason"] is None


def test_profile_moves_the_run_best_only_for_a_faster_kernel():
    ctx = Runtime(context=None)
    record = {"verdict": "ok", "candidate_time": {"measured": True}, "eager_time": {"measured": True, "median_ms": 2.0},
              "compile_time": {"measured": False}, "roofline": {"measured": True, "floor_ms": 0.1}}
    first = nodes.profile({"record": record, "latest": summary(1, median=1.0), "phases": {}, "best": None}, ctx)
    assert first["improved"] and first["best"]["attempt"] == 1
    assert first["baseline"]["eager_ms"] == 2.0 and first["baseline"]["floor_ms"] == 0.1
    slower = nodes.profile({"record": record, "latest": summary(2, median=1.5), "phases": {}, "best": first["best"]}, ctx)
    assert not slower["improved"] and slower["best"]["attempt"] == 1
    faster = nodes.profile({"record": record, "latest": summary(3, median=0.5), "phases": {}, "best": first["best"]}, ctx)
    assert faster["improved"] and faster["best"]["attempt"] == 3
    untimed = nodes.profile({"record": record, "latest": summary(4), "phases": {}, "best": first["best"]}, ctx)
    assert not untimed["improved"]


def untimed_record(device: str) -> dict:
    note = "unavailable: no GPU" if device == "cpu" else "eager failed: boom"
    return {"verdict": "ok", "candidate_time": {"measured": False, "note": note}, "eager_time": {"measured": False},
            "compile_time": {"measured": False}, "roofline": {"measured": False}, "environment": {"device": device}}


def test_where_nothing_is_timed_the_first_correct_kernel_ends_the_run():
    """On a CPU the profile outcome is `untimed`, and the edge out of select (the step's lead is this candidate) goes to stop_untimed,
    which ends the run with one line saying why; decide's budgets never get to spend the rest."""
    state = {**base_state(), "record": untimed_record("cpu"), "latest": summary(1), "phases": {}, "attempts_used": 1}
    state.update(nodes.profile(state, Runtime(context=None)))
    assert state["phases"]["profile"] == "untimed" and state["improved"] and state["best"]["attempt"] == 1
    logs: list[str] = []
    assert nodes.after_select(state, Runtime(context=context(logs))) == "untimed"
    out = nodes.stop_untimed(state, Runtime(context=context(logs)))
    assert out["stop_reason"] == ("timing is unavailable on cpu: stopping at the first correct kernel; "
                                  "run on a GPU to optimize for speed")
    assert logs[-1] == out["stop_reason"] and "attempt 1: ok" in logs[-2]
    # `stop_untimed = false` (CPU tests of the refine loop, RL rollouts) goes on to decide as before
    assert nodes.after_select(state, Runtime(context=context(stop_untimed=False))) == "decide"


def test_a_gpu_record_that_missed_its_timing_is_not_untimed():
    """On a GPU a kernel whose timing failed this once is no reason to stop: decide carries on."""
    state = {**base_state(), "record": untimed_record("cuda:0"), "latest": summary(1), "phases": {}}
    state.update(nodes.profile(state, Runtime(context=None)))
    assert state["phases"]["profile"].startswith("not measured (eager failed")
    assert nodes.after_select(state, Runtime(context=context())) == "decide"
    timed = {**untimed_record("cpu"), "candidate_time": {"measured": True, "median_ms": 1.0}}
    assert nodes.timing_unavailable(timed) is None and nodes.timing_unavailable(untimed_record("cpu"))
