"""Whose kernels did the work, from what the device ran (tools/timing/library.py): library kernels
the reference does not use mark the record `library` (paid no speedup by the reward by default);
in a single-op problem, the library's own kernel for the op, launched from C++ past the op
recorder, is rule single-op. Controls: the reference's own cuBLAS product kept beside a Triton
softmax is not `library`.

    python -m pytest -m gpu tests/eval/test_library_gpu.py
"""
from __future__ import annotations

from pathlib import Path

import pytest

from tools.evaluate import EvalOptions, Evaluator
from tools.record import Verdict
from tools.reward.score import score_record

pytestmark = pytest.mark.gpu
SUITE = Path(__file__).parents[2] / "suite"

SOFTMAX_KERNEL = '''
import math
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def softmax_rows(x_ptr, y_ptr, n, scale, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK)
    x = tl.load(x_ptr + row * n + cols, mask=cols < n, other=-float("inf")) * scale
    x = x - tl.max(x, 0)
    e = tl.exp(x)
    tl.store(y_ptr + row * n + cols, e / tl.sum(e, 0), mask=cols < n)


@triton.jit
def scale(x_ptr, n, s, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(x_ptr + offs, tl.load(x_ptr + offs, mask=offs < n) * s, mask=offs < n)
'''

KEEPS_CUBLAS = SOFTMAX_KERNEL + '''

class ModelNew(nn.Module):
    def forward(self, q, k, v):
        scores = torch.matmul(q, k.transpose(-2, -1)).contiguous()
        probs = torch.empty_like(scores)
        n = scores.shape[-1]
        softmax_rows[(scores.numel() // n,)](scores, probs, n, 1.0 / math.sqrt(q.shape[-1]), BLOCK=triton.next_power_of_2(n))
        return torch.matmul(probs, v)
'''

FUSED_LIBRARY_ATTENTION = SOFTMAX_KERNEL + '''

class ModelNew(nn.Module):
    def forward(self, q, k, v):
        out = torch.nn.functional.scaled_dot_product_attention(q, k, v).contiguous()
        scale[(triton.cdiv(out.numel(), 1024),)](out, out.numel(), 1.0, BLOCK=1024)
        return out
'''

REDISPATCHED_SOFTMAX = SOFTMAX_KERNEL + r'''
from torch.utils.cpp_extension import load_inline

ext = load_inline(name="redispatch_softmax", cpp_sources="""
#include <ATen/Operators.h>
#include <c10/core/DispatchKeySet.h>
at::Tensor run(const at::Tensor& x) {
    return at::_ops::_softmax::redispatch(c10::DispatchKeySet(c10::DispatchKey::CUDA), x, -1, false);
}
""", functions=["run"])


class ModelNew(nn.Module):
    def forward(self, x):
        y = ext.run(x)
        scale[(triton.cdiv(y.numel(), 1024),)](y, y.numel(), 1.0, BLOCK=1024)
        return y
'''


@pytest.fixture(scope="module")
def attention():
    with Evaluator(SUITE / "19_attention.py", EvalOptions(device="cuda:0", timing_budget_s=1.0)) as ev:
        yield ev


def test_the_references_own_product_kept_is_not_library_work(attention):
    result = attention.evaluate(KEEPS_CUBLAS)
    assert result.verdict is Verdict.OK, result.message
    assert result.library is False and result.library_share is not None and result.library_share < 0.5, result.library_share


def test_a_fused_library_attention_is_library_work_and_paid_no_speedup(attention):
    result = attention.evaluate(FUSED_LIBRARY_ATTENTION)
    assert result.verdict is Verdict.OK, result.message
    assert result.library is True and (result.library_share or 0) > 0.5, result.library_share
    assert result.own_kernel_share is not None and result.own_kernel_share < 0.5
    outcome = score_record(result)
    assert outcome.correct and outcome.speedup_term == 0.0 and outcome.library is True


def test_a_single_op_computed_by_the_librarys_kernel_from_cpp_is_rejected():
    """The guard names `redispatch` in C++ first; with that rule off, what the device ran decides."""
    options = EvalOptions(device="cuda:0", timing_budget_s=1.0, disabled_rules=frozenset({"private-api"}))
    with Evaluator(SUITE / "11_row_softmax.py", options) as ev:
        result = ev.evaluate(REDISPATCHED_SOFTMAX)
    assert result.verdict is Verdict.REJECTED, result.message
    assert any(c.name == "single-op" and not c.passed for c in result.checks), result.checks
    assert "library's own kernels" in result.message
