"""Known-correct: layer norm, one program per row: mean, variance, then normalize."""
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def layernorm_kernel(x_ptr, w_ptr, b_ptr, y_ptr, cols, eps, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    base = x_ptr + row * cols
    acc = tl.zeros((BLOCK,), dtype=tl.float32)
    for start in range(0, cols, BLOCK):
        offs = start + tl.arange(0, BLOCK)
        acc += tl.load(base + offs, mask=offs < cols, other=0.0)
    mean = tl.sum(acc, axis=0) / cols
    acc = tl.zeros((BLOCK,), dtype=tl.float32)
    for start in range(0, cols, BLOCK):
        offs = start + tl.arange(0, BLOCK)
        d = tl.where(offs < cols, tl.load(base + offs, mask=offs < cols, other=0.0) - mean, 0.0)
        acc += d * d
    rstd = tl.rsqrt(tl.sum(acc, axis=0) / cols + eps)
    for start in range(0, cols, BLOCK):
        offs = start + tl.arange(0, BLOCK)
        mask = offs < cols
        x = tl.load(base + offs, mask=mask, other=0.0)
        w = tl.load(w_ptr + offs, mask=mask)
        b = tl.load(b_ptr + offs, mask=mask)
        tl.store(y_ptr + row * cols + offs, (x - mean) * rstd * w + b, mask=mask)


class ModelNew(nn.Module):
    def __init__(self, cols: int):
        super().__init__()
        self.norm = nn.LayerNorm(cols)
        with torch.no_grad():
            self.norm.weight.normal_(1.0, 0.1)
            self.norm.bias.normal_(0.0, 0.1)

    def forward(self, x):
        x = x.contiguous()
        cols = x.shape[-1]
        y = torch.empty_like(x)
        layernorm_kernel[(x.numel() // cols,)](x, self.norm.weight, self.norm.bias, y, cols, self.norm.eps,
                                               BLOCK=min(1024, triton.next_power_of_2(cols)))
        return y
