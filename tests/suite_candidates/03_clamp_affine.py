"""Known-correct: multiply, add and clamp in one elementwise kernel."""
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def clamp_affine_kernel(x_ptr, a_ptr, b_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask)
    a = tl.load(a_ptr + offs, mask=mask)
    b = tl.load(b_ptr + offs, mask=mask)
    y = tl.minimum(tl.maximum(x * a + b, -1.0), 1.0)
    tl.store(y_ptr + offs, y, mask=mask)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x, a, b):
        x, a, b = x.contiguous(), a.contiguous(), b.contiguous()
        y = torch.empty_like(x)
        n = x.numel()
        clamp_affine_kernel[(triton.cdiv(n, 1024),)](x, a, b, y, n, BLOCK=1024)
        return y
