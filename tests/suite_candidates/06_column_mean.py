"""Known-correct: one program per block of columns walks down the rows."""
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def column_mean_kernel(x_ptr, y_ptr, rows, cols, BLOCK_R: tl.constexpr, BLOCK_C: tl.constexpr):
    cs = tl.program_id(0) * BLOCK_C + tl.arange(0, BLOCK_C)
    acc = tl.zeros((BLOCK_R, BLOCK_C), dtype=tl.float32)
    for start in range(0, rows, BLOCK_R):
        rs = start + tl.arange(0, BLOCK_R)
        mask = (rs[:, None] < rows) & (cs[None, :] < cols)
        acc += tl.load(x_ptr + rs[:, None] * cols + cs[None, :], mask=mask, other=0.0)
    tl.store(y_ptr + cs, tl.sum(acc, axis=0) / rows, mask=cs < cols)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        x = x.contiguous()
        rows, cols = x.shape
        y = torch.empty(cols, dtype=x.dtype, device=x.device)
        column_mean_kernel[(triton.cdiv(cols, 64),)](x, y, rows, cols, BLOCK_R=32, BLOCK_C=64)
        return y
