"""Known-correct: leaky ReLU, residual add and halving in one elementwise kernel."""
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def leaky_residual_kernel(x_ptr, r_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask)
    r = tl.load(r_ptr + offs, mask=mask)
    y = (tl.where(x > 0, x, 0.1 * x) + r) * 0.5
    tl.store(y_ptr + offs, y, mask=mask)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x, residual):
        x, residual = x.contiguous(), residual.contiguous()
        y = torch.empty_like(x)
        n = x.numel()
        leaky_residual_kernel[(triton.cdiv(n, 1024),)](x, residual, y, n, BLOCK=1024)
        return y
