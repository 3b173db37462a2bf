"""The precision setting (tools/precision.py) reaches both workers: the reference's outputs and the
candidate's are computed with the same float32 arithmetic flags, and the record says which.

On the CPU no TF32 exists, so the flags are read back: the problem's forward adds a code of the
flags its worker holds (cuDNN's TF32 flag + 2 x the matmul's), a candidate either reads them in its
own worker (the precision-flags guard rule switched off for that) or bakes in one setting's code."""
from __future__ import annotations

from pathlib import Path

import pytest

from helpers_eval import describe, options
from tools import Evaluator, Verdict
from tools.precision import PrecisionError

PROBLEM = '''import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, x):
        code = float(torch.backends.cudnn.allow_tf32) + 2.0 * float(torch.backends.cuda.matmul.allow_tf32)
        return x + code


def get_inputs():
    return [torch.randn(1024)]


def get_init_inputs():
    return []
'''

CANDIDATE = '''import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def add_kernel(x_ptr, out_ptr, n, code, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    tl.store(out_ptr + offsets, tl.load(x_ptr + offsets, mask=mask) + code, mask=mask)


class ModelNew(nn.Module):
    def forward(self, x):
        out = torch.empty_like(x)
        add_kernel[(triton.cdiv(x.numel(), 1024),)](x, out, x.numel(), CODE, BLOCK=1024)
        return out
'''
READS_ITS_FLAGS = "float(torch.backends.cudnn.allow_tf32) + 2.0 * float(torch.backends.cuda.matmul.allow_tf32)"
FP32_CODE, TF32_CODE = "0.0", "3.0"  # PyTorch's own defaults (cuDNN TF32 on, matmul off) would read 1.0


@pytest.mark.parametrize("precision, right, wrong", [("fp32", FP32_CODE, TF32_CODE), ("tf32", TF32_CODE, FP32_CODE)])
def test_both_workers_compute_with_the_runs_precision(tmp_path: Path, precision: str, right: str, wrong: str):
    problem = tmp_path / "flags.py"
    problem.write_text(PROBLEM)
    opts = options(tmp_path / "cache", trials=1, precision=precision, disabled_rules=frozenset({"precision-flags"}))
    with Evaluator(problem, opts) as ev:
        own = ev.evaluate(CANDIDATE.replace("CODE", READS_ITS_FLAGS))
        assert own.verdict is Verdict.OK and own.precision == precision, describe(own)  # same flags in both workers
        assert ev.evaluate(CANDIDATE.replace("CODE", right)).verdict is Verdict.OK
        baked = ev.evaluate(CANDIDATE.replace("CODE", wrong))  # the other setting's reference outputs
        assert baked.verdict is Verdict.INCORRECT and baked.precision == precision, describe(baked)


def test_a_precision_that_does_not_exist_is_refused_before_any_worker_starts(tmp_path: Path):
    problem = tmp_path / "flags.py"
    problem.write_text(PROBLEM)
    with pytest.raises(PrecisionError, match="'fp64' is not one of fp32, tf32, bf16, fp16"):
        Evaluator(problem, options(tmp_path / "cache", precision="fp64"))
    assert not (tmp_path / "cache").exists()  # refused before the spawner made its cache
