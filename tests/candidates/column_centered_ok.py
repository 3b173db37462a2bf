"""Honest: one program per column, its mean over the batch subtracted."""
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def center_kernel(x_ptr, y_ptr, M, N, BM: tl.constexpr):
    col = tl.program_id(0)
    r = tl.arange(0, BM)
    inside = r < M
    x = tl.load(x_ptr + r * N + col, mask=inside, other=0.0)
    mean = tl.sum(x, axis=0) / M
    tl.store(y_ptr + r * N + col, x - mean, mask=inside)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        x = x.contiguous()
        M, N = x.shape
        y = torch.empty_like(x)
        center_kernel[(N,)](x, y, M, N, BM=triton.next_power_of_2(M))
        return y
