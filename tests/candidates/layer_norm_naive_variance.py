"""Numerically unsafe: a layer norm whose variance is E[x^2] - E[x]^2 in float32, which loses its
digits when the rows sit far from zero (the stress inputs)."""
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def naive_norm(x_ptr, w_ptr, b_ptr, y_ptr, N, eps, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    offs = tl.arange(0, BLOCK)
    ok = offs < N
    v = tl.load(x_ptr + row * N + offs, mask=ok, other=0.0)
    mean = tl.sum(v, 0) / N
    var = tl.maximum(tl.sum(v * v, 0) / N - mean * mean, 0.0)
    w = tl.load(w_ptr + offs, mask=ok, other=1.0)
    b = tl.load(b_ptr + offs, mask=ok, other=0.0)
    tl.store(y_ptr + row * N + offs, (v - mean) / tl.sqrt(var + eps) * w + b, mask=ok)


class ModelNew(nn.Module):
    def __init__(self, dim: int):
        super().__init__()
        self.norm = nn.LayerNorm(dim)

    def forward(self, x):
        x = x.contiguous()
        y = torch.empty_like(x)
        n = x.shape[-1]
        naive_norm[(x.numel() // n,)](x, self.norm.weight, self.norm.bias, y, n, self.norm.eps, BLOCK=triton.next_power_of_2(n))
        return y
