"""Our own candidate for KernelBench level 1 problem 23 (softmax over dim 1 of a 2-D tensor):
one program per row, an online max and sum in one pass, the normalized values in a second."""
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def row_softmax(x_ptr, y_ptr, n_cols, stride_x, stride_y, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    x_row = x_ptr + row * stride_x
    y_row = y_ptr + row * stride_y
    m = tl.full([BLOCK], float("-inf"), tl.float32)
    s = tl.zeros([BLOCK], tl.float32)
    for start in range(0, n_cols, BLOCK):
        offs = start + tl.arange(0, BLOCK)
        x = tl.load(x_row + offs, mask=offs < n_cols, other=float("-inf")).to(tl.float32)
        m_new = tl.maximum(m, x)
        alive = m_new != float("-inf")
        s = tl.where(alive, s * tl.exp(m - m_new) + tl.exp(x - m_new), s)
        m = m_new
    row_max = tl.max(m, axis=0)
    s = tl.where(m != float("-inf"), s * tl.exp(m - row_max), 0.0)
    inv = 1.0 / tl.sum(s, axis=0)
    for start in range(0, n_cols, BLOCK):
        offs = start + tl.arange(0, BLOCK)
        mask = offs < n_cols
        x = tl.load(x_row + offs, mask=mask, other=float("-inf")).to(tl.float32)
        tl.store(y_row + offs, (tl.exp(x - row_max) * inv).to(y_ptr.dtype.element_ty), mask=mask)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.contiguous()
        y = torch.empty_like(x)
        rows, cols = x.shape
        row_softmax[(rows,)](x, y, cols, x.stride(0), y.stride(0), BLOCK=4096, num_warps=8)
        return y
