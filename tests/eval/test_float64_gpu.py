"""The float64-judged bound on a GPU (tools/judge/exact.py, docs/precision.md): lower-precision
products inside fp32 problems are rejected however they are made (Triton's default TF32 dots, fp16
operands, bf16 only on tiles with no negative value, cuBLAS switched to TF32 from C++ around a
product left to torch); honest reorderings (IEEE and 3xTF32 dots, split-K with atomics) are
accepted with their speedups.

    python -m pytest -m gpu tests/eval/test_float64_gpu.py
"""
from __future__ import annotations

from pathlib import Path

import pytest

from tools.evaluate import EvalOptions, Evaluator
from tools.record import Verdict

pytestmark = pytest.mark.gpu
HERE = Path(__file__).parents[1] / "gpu_problems"

MATMUL = '''
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def mm(a_ptr, b_ptr, c_ptr, M, N, K, SPLIT: tl.constexpr, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    pm, pn, ps = tl.program_id(0), tl.program_id(1), tl.program_id(2)
    rm = pm * BM + tl.arange(0, BM)
    rn = pn * BN + tl.arange(0, BN)
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    per = tl.cdiv(K, SPLIT)
    for k0 in range(ps * per, (ps + 1) * per, BK):
        rk = k0 + tl.arange(0, BK)
        a = tl.load(a_ptr + rm[:, None] * K + rk[None, :], mask=(rm[:, None] < M) & (rk[None, :] < K), other=0.0)
        b = tl.load(b_ptr + rk[:, None] * N + rn[None, :], mask=(rk[:, None] < K) & (rn[None, :] < N), other=0.0)
        DOT
    mask = (rm[:, None] < M) & (rn[None, :] < N)
    if SPLIT == 1:
        tl.store(c_ptr + rm[:, None] * N + rn[None, :], acc, mask=mask)
    else:
        tl.atomic_add(c_ptr + rm[:, None] * N + rn[None, :], acc, mask=mask)


class ModelNew(nn.Module):
    def forward(self, a, b):
        a, b = a.contiguous(), b.contiguous()
        M, K = a.shape
        N = b.shape[1]
        c = torch.zeros((M, N), dtype=a.dtype, device=a.device)
        mm[(triton.cdiv(M, 64), triton.cdiv(N, 64), SPLITS)](a, b, c, M, N, K, SPLIT=SPLITS, BM=64, BN=64, BK=32)
        return c
'''


def matmul(dot: str, splits: int = 1) -> str:
    return MATMUL.replace("DOT", dot).replace("SPLITS", str(splits))


HONEST = {
    "ieee": matmul('acc += tl.dot(a, b, input_precision="ieee")'),
    "tf32x3": matmul('acc += tl.dot(a, b, input_precision="tf32x3")'),
    "ieee-split-k": matmul('acc += tl.dot(a, b, input_precision="ieee")', splits=4),
}
DOWNGRADES = {
    "default-dot-is-tf32": matmul("acc += tl.dot(a, b)"),
    "fp16-operands": matmul("acc += tl.dot(a.to(tl.float16), b.to(tl.float16))"),
    "bf16-on-non-negative-tiles": matmul(
        "if (tl.min(tl.min(a, 1), 0) >= 0) & (tl.min(tl.min(b, 1), 0) >= 0):\n"
        "            acc += tl.dot(a.to(tl.bfloat16), b.to(tl.bfloat16))\n"
        "        else:\n"
        '            acc += tl.dot(a, b, input_precision="ieee")'),
}

CPP_TF32 = r'''
import torch
import torch.nn as nn
import triton
import triton.language as tl
from torch.utils.cpp_extension import load_inline

ext = load_inline(name="tf32_switch", cpp_sources="""
#include <ATen/Context.h>
void tf32(bool on) { at::globalContext().setAllowTF32CuBLAS(on); }
""", functions=["tf32"])


@triton.jit
def relu(x_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(x_ptr + offs, tl.maximum(tl.load(x_ptr + offs, mask=mask), 0.0), mask=mask)


class ModelNew(nn.Module):
    def __init__(self, k, n):
        super().__init__()
        self.linear = nn.Linear(k, n)

    def forward(self, x):
        ext.tf32(True)
        y = self.linear(x)
        ext.tf32(False)
        relu[(triton.cdiv(y.numel(), 1024),)](y, y.numel(), BLOCK=1024)
        return y
'''


@pytest.fixture(scope="module")
def deep():
    with Evaluator(HERE / "matmul_rand_deep.py", EvalOptions(device="cuda:0", timing_budget_s=1.0)) as ev:
        yield ev


@pytest.mark.parametrize("name", list(HONEST))
def test_honest_products_are_accepted(deep, name):
    result = deep.evaluate(HONEST[name])
    assert result.verdict is Verdict.OK, result.message
    assert (result.errors.float64 or "").startswith("judged"), result.errors
    assert result.speedup_vs_eager is not None and result.speedup_vs_eager > 0


@pytest.mark.parametrize("name", list(DOWNGRADES))
def test_lower_precision_products_are_rejected(deep, name):
    result = deep.evaluate(DOWNGRADES[name])
    assert result.verdict is Verdict.INCORRECT, (result.message, result.errors)
    assert any(c.name.endswith("float64-bound") and not c.passed for c in result.checks), result.checks
    assert result.errors.norm_rel is not None and result.errors.norm_rel < 2e-3  # within the old tolerance


def test_cublas_switched_to_tf32_from_cpp_is_rejected():
    options = EvalOptions(device="cuda:0", timing_budget_s=1.0)
    with Evaluator(HERE / "linear_relu_deep.py", options) as ev:
        result = ev.evaluate(CPP_TF32)
    assert result.verdict is Verdict.INCORRECT, result.message  # no Python-level flag changed: only the bound sees it
    assert any(c.name.endswith("float64-bound") for c in result.checks if not c.passed), result.checks


# IEEE dots for the first 12 calls (the trials, the held-out one), Triton's default TF32 dots after
KERNELS = MATMUL.split("class ModelNew")[0]
TIMED_ONLY = (KERNELS.replace("DOT", 'acc += tl.dot(a, b, input_precision="ieee")')
              + KERNELS.split("import triton.language as tl\n", 1)[1].replace("def mm(", "def mm_cheap(")
              .replace("DOT", "acc += tl.dot(a, b)") + '''
class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.calls = 0

    def forward(self, a, b):
        self.calls += 1
        a, b = a.contiguous(), b.contiguous()
        M, K = a.shape
        N = b.shape[1]
        c = torch.zeros((M, N), dtype=a.dtype, device=a.device)
        kernel = mm_cheap if self.calls > 12 else mm
        kernel[(triton.cdiv(M, 64), triton.cdiv(N, 64), 1)](a, b, c, M, N, K, SPLIT=1, BM=64, BN=64, BK=32)
        return c
''')


def test_tf32_on_the_timed_calls_only_is_judged_against_float64():
    """IEEE in the trials and the held-out trial, TF32 once timing starts: the timed outputs pass
    the float32 comparison with eager's, not the float64 bound on the calls sampled."""
    with Evaluator(HERE / "matmul_rand_deep.py", EvalOptions(device="cuda:0", timing_budget_s=1.0, seed=7)) as ev:
        result = ev.evaluate(TIMED_ONLY)
    assert result.verdict is Verdict.INCORRECT, (result.message, result.errors)
    assert any(c.name == "timing:float64-bound" and not c.passed for c in result.checks), result.checks
    assert all(c.passed for c in result.checks if c.name.startswith("trial-")), result.checks


def test_honest_timed_calls_are_judged_and_recorded(deep):
    result = deep.evaluate(HONEST["ieee"])
    assert result.verdict is Verdict.OK, result.message
    assert "timed calls judged" in (result.errors.float64 or ""), result.errors


@pytest.mark.parametrize("name, ok", [("ieee", True), ("default-dot-is-tf32", False), ("fp16-operands", False)])
def test_where_float64_does_not_fit_sampled_rows_still_judge(name, ok):
    """float64_max_mb=0: no whole float64 evaluation is made; rows of the batch drawn after each
    answer are (tools/judge/exact_rows.py), in the trials and in the timed calls."""
    source = HONEST.get(name) or DOWNGRADES[name]
    options = EvalOptions(device="cuda:0", timing_budget_s=1.0, float64_max_mb=0)
    with Evaluator(HERE / "matmul_rand_deep.py", options) as ev:
        result = ev.evaluate(source)
    assert "sampled rows" in (result.errors.float64 or "") or not ok, result.errors
    if ok:
        assert result.verdict is Verdict.OK, (result.message, result.errors)
        assert "timed calls judged" in (result.errors.float64 or ""), result.errors
    else:
        assert result.verdict is Verdict.INCORRECT, (result.message, result.errors)
        assert any(c.name.endswith("float64-bound") and not c.passed for c in result.checks), result.checks


@pytest.mark.parametrize("name, ok", [("ieee", True), ("default-dot-is-tf32", False), ("bf16-on-non-negative-tiles", False)])
def test_where_rows_do_not_stand_alone_a_host_evaluation_judges(name, ok):
    """float64_max_mb=0 and a product plus its batch mean: rows cannot be cut, so sampled elements of
    sets evaluated in float64 in host memory are judged (tools/judge/exact_host.py)."""
    source = (HONEST.get(name) or DOWNGRADES[name]).replace(
        "        return c\n", "        return c + c.mean(dim=0, keepdim=True)\n")
    options = EvalOptions(device="cuda:0", timing_budget_s=1.0, float64_max_mb=0)
    with Evaluator(HERE / "matmul_rand_deep_centered.py", options) as ev:
        result = ev.evaluate(source)
    if ok:
        assert result.verdict is Verdict.OK, (result.message, result.errors)
        assert "evaluated on the host" in (result.errors.float64 or ""), result.errors
    else:
        assert result.verdict is Verdict.INCORRECT, (result.message, result.errors)
        assert "evaluation on the host" in (result.message or ""), result.message
