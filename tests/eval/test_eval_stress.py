"""The stress distribution (tools/worker/inputs.py, "stress:F"): inputs scaled up by the largest
factor (up to 1000) under which the reference stays finite, and moved off centre. A softmax
without the row maximum subtracted passes every other trial and fails this one; the honest
softmax passes it; a problem whose reference overflows at every factor drops it, and says why."""
from __future__ import annotations

import pytest

from helpers_eval import assert_ok, assert_verdict, evaluator, source
from tools import Verdict


@pytest.fixture(scope="module")
def softmax(tmp_path_factory):
    ev = evaluator("wide_softmax_rows", tmp_path_factory.mktemp("ratchet-cache"))
    yield ev
    ev.close()


def test_an_unstabilised_softmax_fails_the_stress_trial(softmax):
    result = softmax.evaluate(source("softmax_unstable"))
    assert_verdict(result, Verdict.INCORRECT, "nan-pattern", "stress inputs: scaled up 1000x")
    assert [c.name for c in result.checks if not c.passed] == ["trial-3:stress:1000:nan-pattern"]
    assert result.distributions == ["problem", "shifted", "signed:0"]


def test_the_honest_softmax_passes_it(softmax):
    result = softmax.evaluate(source("row_softmax_ok"))
    assert_ok(result)
    assert result.distributions == ["problem", "shifted", "signed:0", "stress:1000", "problem"]
    assert "stress" not in result.dropped


def test_a_reference_that_overflows_drops_it(tmp_path):
    ev = evaluator("exp_only", tmp_path)
    try:
        result = ev.evaluate(source("exp_ok"))
    finally:
        ev.close()
    assert_ok(result)
    assert result.dropped["stress"] == ("the reference's output is not finite (or it raises) on inputs scaled up 10x "
                                        "and moved off centre"), result.dropped
    assert not any(d.startswith("stress") for d in result.distributions)


def test_a_large_output_of_the_stress_trial_is_judged_against_float64_not_eager(tmp_path):
    """On stress inputs eager float32 is a yardstick, not the truth: x*x - (x-1)*(x+1) is 1, which
    float64 keeps and eager float32 loses at x ~ 1e7. A kernel that computes 1 differs from eager's
    output far beyond the float32 tolerance there, and is accepted: its error against float64 is 0."""
    ev = evaluator("cancel", tmp_path)
    try:
        result = ev.evaluate(source("cancel_exact_ok"))
    finally:
        ev.close()
    assert_ok(result)
    assert "stress:1000" in result.distributions and (result.errors.float64 or "").startswith("judged (")
    assert result.errors.max_abs is not None and result.errors.max_abs <= 1e-3  # stats of the other trials only
