"""Input distributions that test both halves (tools/worker/inputs.py, tools/judge/trials.py): besides
the problem's own and a shifted one, a signed one in which every continuous input crosses zero
wherever the reference stays finite there; an input that cannot cross zero keeps its own signs,
and a distribution the problem does not allow is dropped and recorded as dropped."""
from __future__ import annotations

import pytest

from helpers_eval import assert_ok, assert_verdict, evaluator, source
from tools import Verdict


@pytest.fixture(scope="module")
def cache_dir(tmp_path_factory):
    return tmp_path_factory.mktemp("ratchet-cache")


def test_relu_as_a_copy_fails_on_inputs_that_cross_zero(cache_dir):
    """The problem draws x in [0, 1) and the shifted inputs stay non-negative: only the signed
    trial shows that a copy is not a ReLU (the stress inputs stay non-negative too). The honest
    kernel passes all five trials."""
    with evaluator("relu_rand", cache_dir) as ev:
        cheat = ev.evaluate(source("relu_as_copy"))
        assert_verdict(cheat, Verdict.INCORRECT, "trial-2:signed:0:values", "signed inputs")
        assert cheat.distributions == ["problem", "shifted"] and cheat.dropped == {}
        honest = ev.evaluate(source("relu_ok"))
    assert_ok(honest)
    assert honest.distributions == ["problem", "shifted", "signed:0", "stress:1000", "problem"]
    assert honest.dropped == {} and honest.to_dict()["distributions"] == honest.distributions


def test_an_input_that_cannot_cross_zero_keeps_its_signs(cache_dir):
    """log(x) * y: y crosses zero in the signed trials; x (under the log) keeps the problem's
    signs, and the record says so."""
    with evaluator("log_mul", cache_dir) as ev:
        result = ev.evaluate(source("log_mul_ok"))
    assert_ok(result)
    assert result.distributions == ["problem", "shifted", "signed:1", "stress:1000", "problem"]
    assert list(result.dropped) == ["signed"] and "input #0 keep the problem's own signs" in result.dropped["signed"]


def test_a_problem_that_allows_no_sign_change_drops_the_signed_trials(cache_dir):
    with evaluator("sqrt_only", cache_dir) as ev:
        result = ev.evaluate(source("sqrt_ok"))
    assert_ok(result)
    assert result.distributions == ["problem", "shifted", "stress:1000", "problem", "shifted"]
    assert "not finite (or it raises) when input #0 cross zero" in result.dropped["signed"]


def test_a_reference_that_raises_on_a_distribution_drops_it_instead_of_failing(cache_dir):
    """binary_cross_entropy raises on values outside [0, 1]: the distributions that move them are
    dropped and recorded, never an evaluator error (each input was tried crossing zero alone)."""
    with evaluator("bce_probabilities", cache_dir) as ev:
        chosen = [ev.trial_distribution(i, ev.seeds[i]) for i in range(3)]
        assert chosen == ["problem"] * 3 and ev.distributions == ["problem"]
        assert "raises) on shifted inputs" in ev.dropped["shifted"]
        assert "(or it raises) when input #0, #1 cross zero" in ev.dropped["signed"]


def test_the_distributions_are_decided_before_any_candidate(cache_dir):
    """Which distributions a problem allows is settled when the evaluator opens, on the trials' own
    seeds: nothing a candidate does later (its out-of-memory on the device, say) can make the
    reference look as if the problem did not allow one."""
    with evaluator("sqrt_only", cache_dir) as ev:
        assert ev.distributions == ["problem", "shifted", "stress:1000"]
        assert list(ev.dropped) == ["signed"]


def test_a_reference_out_of_memory_does_not_drop_a_distribution(tmp_path):
    """The reference runs out of device memory on shifted inputs (another process holds the card as
    the evaluator opens): the distribution is not what failed, and a drop would weaken every trial
    of the evaluator's life, so it stays in the rotation."""
    with evaluator("oom_when_shifted", tmp_path) as ev:
        assert "shifted" not in ev.dropped, ev.dropped
