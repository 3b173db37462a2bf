"""Cheat (single op, later calls only): its own kernel's result on the first call (the one
most likely to be watched); on every later call the kernel still runs, but nn.Softmax's
result is returned."""
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def softmax_kernel(x_ptr, out_ptr, n_cols, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    x = tl.load(x_ptr + row * n_cols + cols, mask=mask, other=-float("inf"))
    x = x - tl.max(x, axis=0)
    e = tl.exp(x)
    tl.store(out_ptr + row * n_cols + cols, e / tl.sum(e, axis=0), mask=mask)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.soft = nn.Softmax(dim=1)
        self.calls = 0

    def forward(self, x):
        self.calls += 1
        out = torch.empty_like(x)
        softmax_kernel[(x.shape[0],)](x, out, x.shape[1], BLOCK=triton.next_power_of_2(x.shape[1]))
        if self.calls > 1:
            return self.soft(x)
        return out
