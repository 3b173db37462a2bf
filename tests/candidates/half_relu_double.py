"""relu(x) * 2 in one Triton kernel for a run cast to a half type. SKEW = s scales the result by
(1 + s) before it is rounded to the half type: 2^-7 is about one bfloat16 unit in the last
place, so most outputs come out one unit off (whether the cast rounds to nearest, as on a GPU, or
truncates, as Triton's CPU interpreter does), within the bfloat16 tolerance (2e-2) while eager's
output is exact."""
import torch
import torch.nn as nn
import triton
import triton.language as tl

SKEW = 0.0


@triton.jit
def relu_double_kernel(x_ptr, out_ptr, n, skew, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    x = tl.load(x_ptr + offsets, mask=mask).to(tl.float32)
    tl.store(out_ptr + offsets, tl.maximum(x, 0.0) * 2.0 * (1.0 + skew), mask=mask)


class ModelNew(nn.Module):
    def forward(self, x):
        out = torch.empty_like(x)
        n = x.numel()
        relu_double_kernel[(triton.cdiv(n, 1024),)](x, out, n, SKEW, BLOCK=1024)
        return out
