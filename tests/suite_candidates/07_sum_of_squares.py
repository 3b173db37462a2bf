"""Known-correct: per-program partial sums of squares, then one program adds them up."""
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def square_partials_kernel(x_ptr, p_ptr, n, BLOCK: tl.constexpr, PER_PROGRAM: tl.constexpr):
    start = tl.program_id(0) * BLOCK * PER_PROGRAM
    acc = tl.zeros((BLOCK,), dtype=tl.float32)
    for i in range(PER_PROGRAM):
        offs = start + i * BLOCK + tl.arange(0, BLOCK)
        x = tl.load(x_ptr + offs, mask=offs < n, other=0.0)
        acc += x * x
    tl.store(p_ptr + tl.program_id(0), tl.sum(acc, axis=0))


@triton.jit
def sum_partials_kernel(p_ptr, out_ptr, n, scale, BLOCK: tl.constexpr):
    acc = tl.zeros((BLOCK,), dtype=tl.float32)
    for start in range(0, n, BLOCK):
        offs = start + tl.arange(0, BLOCK)
        acc += tl.load(p_ptr + offs, mask=offs < n, other=0.0)
    tl.store(out_ptr, tl.sum(acc, axis=0) * scale)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        x = x.contiguous()
        n = x.numel()
        programs = triton.cdiv(n, 1024 * 16)
        partials = torch.empty(programs, dtype=torch.float32, device=x.device)
        out = torch.empty((), dtype=x.dtype, device=x.device)
        square_partials_kernel[(programs,)](x, partials, n, BLOCK=1024, PER_PROGRAM=16)
        sum_partials_kernel[(1,)](partials, out, programs, 1.0, BLOCK=1024)
        return out
