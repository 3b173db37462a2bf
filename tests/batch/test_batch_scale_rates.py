"""benchmarks/batch_scale.py's every-slot-warm rate (warm_rate), on rows written by hand: the rate
issue 17's 1-to-2 GPU ratio is read from, so its window and its partial counting are pinned here."""
from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "batch_scale.py"


@pytest.fixture(scope="module")
def warm_rate():
    spec = importlib.util.spec_from_file_location("batch_scale", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.warm_rate


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
