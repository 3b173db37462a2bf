"""The float64-judged bound where the float64 evaluation does not fit on the device and no row of
the batch stands alone (tools/judge/exact_host.py, docs/precision.md): the set is evaluated in
float64 in host memory, and elements sampled after the candidate answered are held to the bound.
On the CPU, with float64_max_mb=0 so that nothing fits "on the device"."""
from __future__ import annotations

from pathlib import Path

import pytest

from helpers_eval import assert_ok, assert_verdict, evaluate, evaluator, failed, source
from test_eval_float64 import deep_source
from tools import Verdict
from tools.options import Float64Bound

HOST = "evaluated on the host"


def centered(name: str) -> str:
    """A deep_matmul_modes candidate for deep_matmul_centered: its product plus the product's mean over the batch."""
    text = deep_source(name)
    assert text.count("        return c\n") == 1
    return text.replace("        return c\n", "        return c + c.mean(dim=0, keepdim=True)\n")


def by_columns(name: str) -> str:
    """A layer norm candidate across the batch (layer_norm_columns): the same kernel on the transpose."""
    text = source(name)
    assert text.count("        x = x.contiguous()\n") == 1 and text.count("        return y\n") == 1
    return text.replace("        x = x.contiguous()\n", "        x = x.t().contiguous()\n").replace(
        "        return y\n", "        return y.t()\n")


@pytest.fixture(scope="module")
def centered_ev(tmp_path_factory):
    ev = evaluator("deep_matmul_centered", tmp_path_factory.mktemp("ratchet-cache"), float64_max_mb=0)
    yield ev
    ev.close()


def test_an_honest_product_is_accepted_on_elements_of_a_host_evaluation(centered_ev):
    result = centered_ev.evaluate(centered("deep_matmul_ieee_ok"))
    assert_ok(result)
    judged = result.errors.float64 or ""
    assert HOST in judged and "not independent" not in judged and "not judged" not in judged, result.errors
    assert result.errors.float64_norm_ratio is not None and result.errors.float64_norm_ratio <= Float64Bound().norm_multiple


@pytest.mark.parametrize("candidate", ["deep_matmul_tf32", "deep_matmul_fp16"])
def test_a_lower_precision_product_whose_rows_do_not_stand_alone_is_rejected(centered_ev, candidate):
    """Before the host evaluation these were `ok`: rows of a product plus its batch mean are not
    independent, so nothing was judged against float64 and the float32 tolerance passed them."""
    result = centered_ev.evaluate(centered(candidate))
    assert_verdict(result, Verdict.INCORRECT, "float64-bound", "float64 evaluation on the host", "eager float32")
    assert result.errors.norm_rel is not None and result.errors.norm_rel < 2e-3  # within the float32 tolerance


def test_a_naive_variance_across_the_batch_fails_the_stress_trial_judged_on_the_host(tmp_path):
    welford, naive = evaluate("layer_norm_columns", tmp_path, by_columns("layer_norm_welford_ok"),
                              by_columns("layer_norm_naive_variance"), float64_max_mb=0)
    assert_ok(welford)
    assert HOST in (welford.errors.float64 or ""), welford.errors
    assert naive.verdict is Verdict.INCORRECT, naive.message
    assert failed(naive)[:1] == ["trial-3:stress:1000:float64-bound"], failed(naive)
    assert "evaluation on the host" in (naive.message or ""), naive.message


def test_with_no_host_memory_allowed_the_record_says_why_it_was_not_judged(tmp_path):
    (result,) = evaluate("deep_matmul_centered", tmp_path, centered("deep_matmul_ieee_ok"), float64_max_mb=0,
                         float64_host_mb=0)
    assert_ok(result)
    judged = result.errors.float64 or ""
    assert "not judged: output" in judged and "not on the host: switched off" in judged and "float64_host_mb" in judged, result.errors


def test_a_host_evaluation_that_disagrees_with_eager_is_not_used(tmp_path):
    """A forward that computes otherwise in float64: at open, eager is 1% (relative) off the host
    evaluation, so no output is judged against it, and the record says why."""
    (result,) = evaluate("float64_otherwise", tmp_path, source("column_centered_ok"), float64_max_mb=0)
    assert_ok(result)
    judged = result.errors.float64 or ""
    assert "not on the host: eager differs from the float64 evaluation on the host" in judged, judged


def test_a_small_output_whose_rows_mix_is_judged_whole_on_the_host_pooled_over_the_trials(tmp_path):
    """Each column less its mean over the batch, 48 x 32: fewer than 4096 elements, so each trial's
    whole output is evaluated on the host and the errors are pooled over the trials."""
    (result,) = evaluate("column_centered", tmp_path, source("column_centered_ok"), float64_max_mb=0)
    assert_ok(result)
    judged = result.errors.float64 or ""
    assert HOST in judged and "not judged" not in judged, judged


@pytest.mark.parametrize("mode, ok", [(0, True), (2, False)])
def test_rows_that_mix_only_on_some_distributions_are_judged_on_the_host(tmp_path, mode, ok):
    """A product scaled by its global norm when that is large: on the problem's own inputs its rows
    stand alone, on shifted and stress inputs they do not. A candidate computing TF32 operands only
    where the clip acts was `ok` when row independence was decided on the problem's inputs alone
    (an attacker helper, stop 53); every distribution is tried at open now."""
    text = source("deep_matmul_clipped_switch")
    assert "CLIPPED = 2" in text
    (result,) = evaluate("deep_matmul_clipped", tmp_path, text.replace("CLIPPED = 2", f"CLIPPED = {mode}"),
                         float64_max_mb=0)
    if ok:
        assert_ok(result)
        assert HOST in (result.errors.float64 or ""), result.errors
    else:
        assert_verdict(result, Verdict.INCORRECT, "float64-bound", "float64 evaluation on the host")


def test_a_forward_that_fails_on_the_host_leaves_the_problem_judged_as_before(tmp_path):
    """A ValueError in the host evaluation at open (device-only code) made the problem fail to open;
    now the host evaluation is not used, and the record says why."""
    (result,) = evaluate("float64_device_only", tmp_path, source("column_centered_ok"), float64_max_mb=0)
    assert_ok(result)
    judged = result.errors.float64 or ""
    assert "not on the host" in judged and "ValueError" in judged, judged


def test_a_batch_norm_in_training_mode_is_judged_on_the_host_and_its_held_out_sets_are_named(tmp_path):
    """benchmarks/eval_speed.py's honest batch norm (batch_norm_train), at a small size: judged on
    the host in every main trial; the held-out sets, not evaluated there, are named in the record."""
    candidate = (Path(__file__).parents[2] / "benchmarks" / "candidates" / "batch_norm_train.py").read_text()
    (result,) = evaluate("batch_norm_train", tmp_path, candidate, float64_max_mb=0)
    assert_ok(result)
    judged = result.errors.float64 or ""
    assert "5 outputs on sets evaluated on the host" in judged, judged
    assert "output (variant:0): its rows do not stand alone, and a held-out set is not evaluated on the host" in judged, judged
