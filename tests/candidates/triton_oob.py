"""Fault (illegal memory access): the kernel stores far outside its output."""
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def far_store_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offsets, mask=offsets < n)
    tl.store(out_ptr + offsets + (1 << 40), x)


class ModelNew(nn.Module):
    def __init__(self, scale):
        super().__init__()
        self.scale = scale

    def forward(self, x, y):
        out = torch.empty_like(x)
        n = x.numel()
        far_store_kernel[(triton.cdiv(n, 1024),)](x, out, n, BLOCK=1024)
        return out
