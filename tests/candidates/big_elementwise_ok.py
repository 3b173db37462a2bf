"""Honest: relu(x) * 2 in one Triton kernel, for the multi-GB problem."""
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def relu_double_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    x = tl.load(x_ptr + offsets, mask=mask)
    tl.store(out_ptr + offsets, tl.maximum(x, 0.0) * 2.0, mask=mask)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        out = torch.empty_like(x)
        n = x.numel()
        relu_double_kernel[(triton.cdiv(n, 4096),)](x, out, n, BLOCK=4096)
        return out
