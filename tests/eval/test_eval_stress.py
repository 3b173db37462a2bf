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
