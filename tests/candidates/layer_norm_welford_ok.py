"""Honest: a layer norm whose mean and variance come from Welford's update over the row in blocks
(another summation order than eager's), merged across lanes."""
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def welford_norm(x_ptr, w_ptr, b_ptr, y_ptr, N, eps, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    mean = tl.zeros((BLOCK,), tl.float32)
    m2 = tl.zeros((BLOCK,), tl.float32)
    cnt = tl.zeros((BLOCK,), tl.float32)
    for k in range(0, N, BLOCK):
        offs = k + tl.arange(0, BLOCK)
        ok = offs < N
        v = tl.load(x_ptr + row * N + offs, mask=ok, other=0.0)
        c1 = cnt + ok.to(tl.float32)
        d = v - mean
        mean = tl.where(ok, mean + d / tl.maximum(c1, 1.0), mean)
        m2 = tl.where(ok, m2 + d * (v - mean), m2)
        cnt = c1
    total = tl.sum(cnt, 0)
    gmean = tl.sum(mean * cnt, 0) / total
    gm2 = tl.sum(m2 + cnt * (mean - gmean) * (mean - gmean), 0)
    rstd = 1.0 / tl.sqrt(gm2 / total + eps)
    for k in range(0, N, BLOCK):
        offs = k + tl.arange(0, BLOCK)
        ok = offs < N
        v = tl.load(x_ptr + row * N + offs, mask=ok, other=0.0)
        w = tl.load(w_ptr + offs, mask=ok, other=1.0)
        b = tl.load(b_ptr + offs, mask=ok, other=0.0)
        tl.store(y_ptr + row * N + offs, (v - gmean) * rstd * w + b, mask=ok)


class ModelNew(nn.Module):
    def __init__(self, dim: int):
        super().__init__()
        self.norm = nn.LayerNorm(dim)

    def forward(self, x):
        x = x.contiguous()
        y = torch.empty_like(x)
        n = x.shape[-1]
        welford_norm[(x.numel() // n,)](x, self.norm.weight, self.norm.bias, y, n, self.norm.eps, BLOCK=64)
        return y
