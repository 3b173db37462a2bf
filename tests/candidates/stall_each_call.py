"""Fault: correct, but every forward() sleeps just under the trial timeout first (a candidate
that knows it will fail holding the evaluation for as long as each stage allows)."""
import time

import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def relu_add_scale_kernel(x_ptr, y_ptr, out_ptr, n, scale, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    x = tl.load(x_ptr + offsets, mask=mask)
    y = tl.load(y_ptr + offsets, mask=mask)
    tl.store(out_ptr + offsets, tl.maximum(x + y, 0.0) * scale, mask=mask)


class ModelNew(nn.Module):
    def __init__(self, scale):
        super().__init__()
        self.scale = scale

    def forward(self, x, y):
        time.sleep(2.0)
        out = x.new_empty(x.shape)
        n = x.numel()
        relu_add_scale_kernel[(triton.cdiv(n, 1024),)](x, y, out, n, self.scale, BLOCK=1024)
        return out
