"""--precision bf16 and fp16 (tools/precision.py, docs/precision.md), on the CPU: the problem's
floating parameters, buffers and inputs are cast in both workers, so the candidate gets half
tensors; its outputs are judged against the reference evaluated in float64 with eager's own error
in the half type as the yardstick, so a coarser format's rounding is refused while the
float32-tolerance check alone (bfloat16: 2e-2) would pass it."""
from __future__ import annotations

import pytest

from helpers_eval import assert_ok, assert_verdict, evaluator, source
from tools import Verdict


def half() -> str:
    return source("half_elementwise")


@pytest.mark.parametrize("precision", ["bf16", "fp16"])
def test_an_honest_kernel_gets_half_inputs_and_is_judged_against_float64(tmp_path, precision):
    with evaluator("elementwise", tmp_path, precision=precision) as ev:
        result = ev.evaluate(half())
    assert_ok(result)
    assert result.precision == precision
    assert (result.errors.float64 or "").startswith("judged ("), result.errors
    assert result.errors.float64_norm_ratio is not None and result.errors.float64_norm_ratio <= 2.0, result.errors


def test_a_kernel_written_for_float32_inputs_fails_where_the_run_is_half(tmp_path):
    with evaluator("elementwise", tmp_path) as ev:  # fp32: the same candidate raises on float32 inputs
        assert ev.evaluate(half()).verdict is Verdict.RUNTIME_ERROR


def test_rounding_coarser_than_eager_under_bf16_is_refused_by_the_float64_bound(tmp_path):
    """relu(x) * 2 is exact in bfloat16: a result about one unit in the last place off in most of its
    elements passes the bfloat16 tolerance and is refused against float64, while the same kernel
    without the skew is accepted."""
    skewed = source("half_relu_double").replace("SKEW = 0.0", "SKEW = 2.0 ** -7")
    with evaluator("relu_double", tmp_path, precision="bf16") as ev:
        honest, off = ev.evaluate(source("half_relu_double")), ev.evaluate(skewed)
    assert_ok(honest)
    assert_verdict(off, Verdict.INCORRECT, "float64-bound")
