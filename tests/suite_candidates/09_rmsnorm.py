"""Known-correct: RMS norm, one program per row."""
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def rmsnorm_kernel(x_ptr, w_ptr, y_ptr, cols, eps, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    base = x_ptr + row * cols
    acc = tl.zeros((BLOCK,), dtype=tl.float32)
    for start in range(0, cols, BLOCK):
        offs = start + tl.arange(0, BLOCK)
        x = tl.load(base + offs, mask=offs < cols, other=0.0)
        acc += x * x
    rstd = tl.rsqrt(tl.sum(acc, axis=0) / cols + eps)
    for start in range(0, cols, BLOCK):
        offs = start + tl.arange(0, BLOCK)
        mask = offs < cols
        x = tl.load(base + offs, mask=mask, other=0.0)
        w = tl.load(w_ptr + offs, mask=mask)
        tl.store(y_ptr + row * cols + offs, x * rstd * w, mask=mask)


class ModelNew(nn.Module):
    def __init__(self, dim: int, eps: float):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(1.0 + 0.1 * torch.randn(dim))

    def forward(self, x):
        x = x.contiguous()
        cols = x.shape[-1]
        y = torch.empty_like(x)
        rmsnorm_kernel[(x.numel() // cols,)](x, self.weight, y, cols, self.eps,
                                             BLOCK=min(1024, triton.next_power_of_2(cols)))
        return y
