"""The float64-judged bound (tools/judge/exact.py, docs/precision.md), on the CPU: in an fp32
problem with a deep reduction (K = 512, non-negative inputs), products of TF32 or fp16 operands
are within the float32 tolerance but are rejected against the reference evaluated in float64,
however the downgrade is made (rounded bits, casts, a switch on the values); honest reorderings
(another tiling, split-K with atomics, 3xTF32) are accepted. The multiples were calibrated on a
GPU (benchmarks/precision_calibration.py)."""
from __future__ import annotations

import pytest

from helpers_eval import assert_ok, assert_verdict, evaluator, source
from tools import Verdict
from tools.options import Float64Bound


# (mode, split-K programs) of tests/candidates/deep_matmul_modes.py, by the name a test gives them
DEEP = {"deep_matmul_ieee_ok": (0, 1), "deep_matmul_splitk_ok": (0, 4), "deep_matmul_tf32x3_ok": (1, 1),
        "deep_matmul_tf32": (2, 1), "deep_matmul_fp16": (3, 1), "deep_matmul_fp16_nonneg": (4, 1)}


def deep_source(name: str) -> str:
    mode, split = DEEP[name]
    text = source("deep_matmul_modes")
    assert "MODE, SPLIT = 0, 1" in text
    return text.replace("MODE, SPLIT = 0, 1", f"MODE, SPLIT = {mode}, {split}")


@pytest.fixture(scope="module")
def deep(tmp_path_factory):
    ev = evaluator("deep_matmul", tmp_path_factory.mktemp("ratchet-cache"))
    yield ev
    ev.close()


@pytest.mark.parametrize("candidate", ["deep_matmul_ieee_ok", "deep_matmul_splitk_ok", "deep_matmul_tf32x3_ok"])
def test_honest_reorderings_are_accepted(deep, candidate):
    result = deep.evaluate(deep_source(candidate))
    assert_ok(result)
    judged = result.errors.float64 or ""
    assert judged.startswith("judged (") and int(judged.split("(")[1].split()[0]) >= 5, result.errors  # held-out ones too
    bound = Float64Bound()
    assert result.errors.float64_norm_ratio is not None and result.errors.float64_norm_ratio <= bound.norm_multiple
    assert "float64-bound" in [c.name for c in result.checks if c.passed]


@pytest.mark.parametrize("candidate", ["deep_matmul_tf32", "deep_matmul_fp16", "deep_matmul_fp16_nonneg"])
def test_lower_precision_products_are_rejected(deep, candidate):
    result = deep.evaluate(deep_source(candidate))
    assert_verdict(result, Verdict.INCORRECT, "float64-bound", "float64 evaluation of the reference", "eager float32")
    assert result.errors.max_rel is not None and result.errors.norm_rel is not None
    assert result.errors.norm_rel < 2e-3  # the float32 tolerance alone would have passed it


def test_a_small_output_is_judged_on_its_errors_pooled_over_the_trials(deep):
    """16 x 16 outputs: too few elements for one trial's eager error to be a stable yardstick, so the
    trials' errors are pooled (IEEE on the signed trial's tiles does not hide the others')."""
    result = deep.evaluate(deep_source("deep_matmul_fp16_nonneg"))
    assert_verdict(result, Verdict.INCORRECT, "float64-bound", "output (pooled over the trials")
    assert [c.name for c in result.checks if c.name.startswith("trial-")] == \
        ["trial-0:problem", "trial-1:shifted", "trial-2:signed:0,1", "trial-3:stress:1000", "trial-4:problem"]


def test_switched_off_it_is_recorded(tmp_path):
    ev = evaluator("deep_matmul", tmp_path, float64_bound=None)
    try:
        result = ev.evaluate(deep_source("deep_matmul_fp16"))
    finally:
        ev.close()
    assert result.verdict is Verdict.OK and result.errors.float64 == "not judged: switched off"


@pytest.mark.parametrize("problem, candidate", [
    ("linear_relu", "linear_relu_transposed_ok"),  # a weight transposed once in __init__
    ("layer_norm_rows", "layer_norm_welford_ok"),  # Welford's mean and variance, in blocks
    ("conv2d_small", "conv2d_im2col_ok"),  # an as_strided im2col and a GEMM
])
def test_honest_controls_are_accepted(tmp_path, problem, candidate):
    ev = evaluator(problem, tmp_path)
    try:
        result = ev.evaluate(source(candidate))
    finally:
        ev.close()
    assert_ok(result)
    assert (result.errors.float64 or "").startswith("judged ("), result.errors


def test_a_variance_as_the_mean_square_less_the_squared_mean_fails_the_stress_trial(tmp_path):
    ev = evaluator("layer_norm_rows", tmp_path)
    try:
        result = ev.evaluate(source("layer_norm_naive_variance"))
    finally:
        ev.close()
    assert result.verdict is Verdict.INCORRECT, result.message
    failed = [c.name for c in result.checks if not c.passed]
    assert failed and failed[0].startswith("trial-3:stress"), failed


def test_where_float64_does_not_fit_rows_drawn_after_the_answer_are_judged(tmp_path):
    """float64_max_mb=0: no whole float64 evaluation fits, so rows of the batch, drawn after the
    candidate answered, are evaluated in float64 (tools/judge/exact_rows.py): the honest product is
    accepted and the fp16 one still rejected."""
    ev = evaluator("deep_matmul", tmp_path, float64_max_mb=0)
    try:
        honest, fp16 = ev.evaluate(deep_source("deep_matmul_ieee_ok")), ev.evaluate(deep_source("deep_matmul_fp16"))
    finally:
        ev.close()
    assert_ok(honest)
    assert "sampled rows" in (honest.errors.float64 or "") and "over float64_max_mb" in honest.errors.float64, honest.errors
    assert honest.errors.float64_norm_ratio is not None and honest.errors.float64_norm_ratio <= Float64Bound().norm_multiple
    assert_verdict(fp16, Verdict.INCORRECT, "float64-bound", "float64 evaluation of the reference", "rows of the batch sampled")


def test_rows_that_depend_on_the_rest_of_the_batch_are_not_judged_on_a_sample(tmp_path):
    """Each column less its mean over the batch: the rows alone give other values, so the sample
    says nothing of the candidate's error and, with the host evaluation switched off
    (tests/eval/test_eval_float64_host.py has it on), the record says why it was not judged."""
    ev = evaluator("column_centered", tmp_path, float64_max_mb=0, float64_host_mb=0)
    try:
        result = ev.evaluate(source("column_centered_ok"))
    finally:
        ev.close()
    assert_ok(result)
    assert "not independent of the rest of the batch" in (result.errors.float64 or ""), result.errors


def assert_sampled_rows_judge(problem: str, tmp_path, source_of) -> None:
    """With no room for a whole float64 evaluation, sampled rows judge the product: the IEEE one
    accepted, the TF32 one rejected against float64."""
    ev = evaluator(problem, tmp_path, float64_max_mb=0)
    try:
        honest, tf32 = ev.evaluate(source_of("deep_matmul_ieee_ok")), ev.evaluate(source_of("deep_matmul_tf32"))
    finally:
        ev.close()
    assert_ok(honest)
    assert "sampled rows" in (honest.errors.float64 or "") and "not judged" not in honest.errors.float64, honest.errors
    assert_verdict(tf32, Verdict.INCORRECT, "float64-bound", "float64 evaluation of the reference")


def test_sampled_rows_of_a_square_product_cut_the_first_operand_alone(tmp_path):
    """Both operands lead with the batch's size: cutting both (the first plan) makes the reference
    fail, and the rows were left unjudged, so a TF32 product passed (an attacker helper, stop 45).
    The next plan cuts the first operand alone; the TF32 product is rejected, the IEEE one accepted."""
    assert_sampled_rows_judge("square_matmul", tmp_path, deep_source)


def test_sampled_rows_of_a_transposed_product_cut_the_first_operand_along_its_columns(tmp_path):
    """a.T @ b: no input leads with the output's rows, so no cut along a leading size works and the
    rows were left unjudged (a TF32 product passed: issue 35, stop 45). The first operand cut along
    its second dimension gives the rows: the TF32 product is rejected, the IEEE one accepted."""
    def transposed(name: str) -> str:
        text = deep_source(name)
        assert "        a, b = a.contiguous(), b.contiguous()" in text
        return text.replace("        a, b = a.contiguous(), b.contiguous()", "        a, b = a.t().contiguous(), b.contiguous()")
    assert_sampled_rows_judge("transposed_matmul", tmp_path, transposed)

