"""The Triton comparison kernels (used by the parent on a GPU) agree with the torch rule.

On the CPU they run in Triton's interpreter; tests/test_compare.py style cases: equal, within
tolerance, one element off, NaN/Inf patterns, a whole-tensor drift, an all-zero reference.
"""
from __future__ import annotations

import pytest
import torch

from tools.judge import compare_gpu
from tools.judge.compare import TOLERANCES, float_summary


def cases():
    g = torch.Generator().manual_seed(0)
    r = torch.randn(10_000, generator=g)
    yield "equal", r, r.clone()
    yield "within", r, r + 1e-4 * torch.randn(10_000, generator=g)
    off = r.clone()
    off[1234] += 5.0
    yield "one-off", r, off
    nan_r = r.clone()
    nan_r[7] = float("nan")
    yield "nan-same", nan_r, nan_r.clone()
    yield "nan-missing", nan_r, r.clone()
    inf_c = r.clone()
    inf_c[9] = float("inf")
    yield "inf-extra", r, inf_c
    yield "drift", r, r * 1.003  # every element within its bound, the norm is not
    z = torch.zeros(5000)
    yield "zeros", z, z + 1e-3
    yield "half", r.half(), (r + 1e-3).half()


@pytest.mark.parametrize("name,r,c", list(cases()), ids=[c[0] for c in cases()])
def test_kernel_agrees_with_the_torch_rule(name, r, c):
    tol = TOLERANCES[r.dtype]
    expected = float_summary(r, c, tol)
    got = compare_gpu.float_summary(r, c, tol)
    assert got["ok"] == expected["ok"], (name, got, expected)
    if torch.isfinite(torch.tensor(expected["max_abs"])):
        assert got["max_abs"] == pytest.approx(expected["max_abs"], rel=1e-3, abs=1e-6)
        assert got["norm_rel"] == pytest.approx(expected["norm_rel"], rel=1e-2, abs=1e-9)
