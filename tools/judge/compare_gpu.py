"""The comparison of two large floating tensors on a GPU in two passes over memory, with Triton
kernels run by the trusted parent: the reference's finite sum of squares (for its RMS), then
one pass over both tensors that counts NaN/Inf pattern differences and elementwise bound
violations and reduces the largest absolute and relative errors and the error's sum of
squares. The same rule as compare.float_summary, which torch ops implement in about twenty
passes; this one is what keeps verifying every timed output of a multi-GB problem cheap.
"""
from __future__ import annotations

from typing import Any

import torch
import triton
import triton.language as tl

BLOCK = 4096
SUPPORTED = (torch.float32, torch.float16, torch.bfloat16)


@triton.jit
def _ref_sumsq(r_ptr, n, out_ptr, BLOCK: tl.constexpr):
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    r = tl.load(r_ptr + offs, mask=mask, other=0.0).to(tl.float32)
    finite = (r == r) & (tl.abs(r) < float("inf"))
    r = tl.where(finite & mask, r, 0.0)
    tl.atomic_add(out_ptr, tl.sum(r * r, axis=0))
    tl.atomic_add(out_ptr + 1, tl.sum((finite & mask).to(tl.float32), axis=0))


@triton.jit
def _check(r_ptr, c_ptr, n, scale_ptr, atol, rtol, out_ptr, BLOCK: tl.constexpr):
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    r = tl.load(r_ptr + offs, mask=mask, other=0.0).to(tl.float32)
    c = tl.load(c_ptr + offs, mask=mask, other=0.0).to(tl.float32)
    inf = float("inf")
    r_nan, c_nan = r != r, c != c
    pattern = (r_nan != c_nan) | ((r == inf) != (c == inf)) | ((r == -inf) != (c == -inf))
    finite = (~r_nan) & (tl.abs(r) < inf)
    sums = tl.load(scale_ptr)
    count = tl.load(scale_ptr + 1)
    rms = tl.sqrt(sums / tl.maximum(count, 1.0))
    scale = tl.where(sums > 0, rms, 1.0)
    ok = mask & finite
    d = tl.where(ok, tl.abs(c - r), 0.0)
    d = tl.where(d == d, d, inf)  # a NaN difference where the reference is finite: a violation
    bound = atol * scale + rtol * tl.abs(r)
    over = ok & (d > bound)
    tl.atomic_add(out_ptr, tl.sum((pattern & mask).to(tl.float32), axis=0))
    tl.atomic_add(out_ptr + 1, tl.sum(over.to(tl.float32), axis=0))
    tl.atomic_max(out_ptr + 2, tl.max(d, axis=0))
    rel = d / (tl.abs(r) + 1e-12 * scale + 1e-30)
    tl.atomic_max(out_ptr + 3, tl.max(tl.where(ok, rel, 0.0), axis=0))
    tl.atomic_add(out_ptr + 4, tl.sum(d * d, axis=0))


def usable(r: torch.Tensor, c: torch.Tensor) -> bool:
    return r.is_cuda and r.dtype in SUPPORTED and r.is_contiguous() and c.dtype == r.dtype and c.device == r.device


def float_summary(r: torch.Tensor, c: torch.Tensor, tol: Any) -> dict[str, Any]:
    """Same contract as compare.float_summary, for contiguous flat CUDA tensors in SUPPORTED."""
    n = r.numel()
    c = c.contiguous()
    grid = (triton.cdiv(n, BLOCK),)
    acc = torch.zeros(2, dtype=torch.float32, device=r.device)
    _ref_sumsq[grid](r, n, acc, BLOCK=BLOCK)
    out = torch.zeros(5, dtype=torch.float32, device=r.device)
    _check[grid](r, c, n, acc, float(tol.atol), float(tol.rtol), out, BLOCK=BLOCK)
    pattern, over, max_abs, max_rel, diff_sq, ref_sq, _ = torch.cat([out, acc]).tolist()  # one sync
    norm_rel = (diff_sq / ref_sq) ** 0.5 if ref_sq > 0 else diff_sq ** 0.5
    ok = pattern == 0 and over == 0 and norm_rel <= tol.norm_rtol
    return {"ok": ok, "max_abs": max_abs, "max_rel": max_rel, "norm_rel": norm_rel}
