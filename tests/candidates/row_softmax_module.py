"""Cheat (single op, invisible to the static gate): nn.Softmax, a module, computes it;
the kernel is launched on a copy so a launch is seen."""
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

    def forward(self, x):
        scratch = torch.empty_like(x)
        softmax_kernel[(x.shape[0],)](x, scratch, x.shape[1], BLOCK=triton.next_power_of_2(x.shape[1]))
        return self.soft(x)
