"""benchmarks/batch_scale.py's every-slot-warm rate (warm_rate, in benchmarks/batch_rows.py), on rows
written by hand: the rate issue 17's 1-to-2 GPU ratio is read from, so its window and its partial counting are pinned here;
and its count and list of attempts that were not ok (not_ok_attempts, by_check), read from a real workspace."""
from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "batch_rows.py"


@pytest.fixture(scope="module")
def script():
    spec = importlib.util.spec_from_file_location("batch_rows", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def warm_rate(script):
    return script.warm_rate


def rows(*spans: tuple[float, float]) -> list[dict]:
    return [{"started_at": 1000.0 + s, "finished_at": 1000.0 + e} for s, e in spans]


def test_one_slot_counts_the_problems_after_its_cold_one(warm_rate):
    # cold 0-10 s, then two problems of 2 s: 2 problems in the 4 s window
    assert warm_rate(rows((0, 10), (10, 12), (12, 14)), 1) == pytest.approx(1800.0)


def test_two_slots_of_equal_problems_give_twice_the_rate(warm_rate):
    one = warm_rate(rows((0, 10), (10, 12), (12, 14), (14, 16), (16, 18)), 1)
    two = warm_rate(rows((0, 10), (0, 10), (10, 12), (10, 12), (12, 14), (12, 14), (14, 16), (14, 16)), 2)
    assert two == pytest.approx(2 * one)


def test_the_window_opens_when_the_last_slot_is_warm(warm_rate):
    # slot B's cold problem ends at 12; slot A's second problem (10-14) is half inside the window
    value = warm_rate(rows((0, 10), (0, 12), (10, 14), (12, 14), (14, 16)), 2)
    assert value == pytest.approx((0.5 + 1 + 1) / 4 * 3600)


def test_no_rate_without_a_warm_problem_or_with_an_untimed_row(warm_rate):
    assert warm_rate(rows((0, 10), (0, 10)), 2) is None
    assert warm_rate(rows((0, 10), (10, 12)) + [{"started_at": None, "finished_at": None}], 1) is None


def test_attempts_that_were_not_ok_are_counted_by_the_check_that_decided_them(script, tmp_path):
    from helpers_workspace import timed, write_problem

    from agent.workspace.root import Workspace
    from tools.record import Check, Verdict

    suite = tmp_path / "suite"
    names = ["c01_p", "c02_p", "c03_p"]  # c03 has no workspace: its missing row is faults()' to report
    for name in names:
        write_problem(suite / f"{name}.py")
    rejected = timed(Verdict.REJECTED, 0.2)
    rejected.checks = [Check("guard", True), Check("timing:two-clocks", False, "parent 0.55 ms, allowed 0.54")]
    with Workspace(tmp_path / "ws").open_problem(suite / "c01_p.py") as repo:
        repo.commit_attempt("a", rejected, model="builtin", run_id="r")
        repo.commit_attempt("b", timed(Verdict.OK, 0.2), model="builtin", run_id="r")
    with Workspace(tmp_path / "ws").open_problem(suite / "c02_p.py") as repo:
        repo.commit_attempt("a", rejected, model="builtin", run_id="r")
        repo.commit_attempt("b", timed(Verdict.INCORRECT, 0.2), model="builtin", run_id="r")
    listed = script.not_ok_attempts(tmp_path / "ws", suite, names)
    assert script.by_check(listed) == {"timing:two-clocks": 2, "incorrect": 1}
    assert [(a["problem"], a["attempt"], a["check"]) for a in listed] == [
        ("c01_p", 1, "timing:two-clocks"), ("c02_p", 1, "timing:two-clocks"), ("c02_p", 2, "incorrect")]
    assert listed[0]["detail"] == "parent 0.55 ms, allowed 0.54"
