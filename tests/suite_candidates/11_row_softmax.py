"""Known-correct: row softmax, online max/sum over column blocks."""
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def softmax_kernel(x_ptr, mask_ptr, y_ptr, cols, inv_temperature, HAS_MASK: tl.constexpr, LOG: tl.constexpr,
                   BLOCK: tl.constexpr):
    # online max and sum over column blocks, then a second pass writes the row
    row = tl.program_id(0)
    base = row * cols
    m = tl.full((BLOCK,), float("-inf"), dtype=tl.float32)
    s = tl.zeros((BLOCK,), dtype=tl.float32)
    for start in range(0, cols, BLOCK):
        offs = start + tl.arange(0, BLOCK)
        valid = offs < cols
        if HAS_MASK:
            valid = valid & (tl.load(mask_ptr + base + offs, mask=offs < cols, other=0) != 0)
        x = tl.where(valid, tl.load(x_ptr + base + offs, mask=offs < cols, other=0.0) * inv_temperature, float("-inf"))
        new_m = tl.maximum(m, x)
        safe = tl.where(new_m == float("-inf"), 0.0, new_m)
        s = s * tl.exp(m - safe) + tl.exp(x - safe)
        m = new_m
    row_max = tl.max(m, axis=0)
    total = tl.sum(s * tl.exp(m - row_max), axis=0)
    for start in range(0, cols, BLOCK):
        offs = start + tl.arange(0, BLOCK)
        inside = offs < cols
        valid = inside
        if HAS_MASK:
            valid = valid & (tl.load(mask_ptr + base + offs, mask=inside, other=0) != 0)
        x = tl.where(valid, tl.load(x_ptr + base + offs, mask=inside, other=0.0) * inv_temperature, float("-inf"))
        if LOG:
            y = x - row_max - tl.log(total)
        else:
            y = tl.exp(x - row_max) / total
        tl.store(y_ptr + base + offs, y, mask=inside)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        x = x.contiguous()
        cols = x.shape[-1]
        y = torch.empty_like(x)
        softmax_kernel[(x.numel() // cols,)](x, x, y, cols, 1.0, HAS_MASK=False, LOG=False,
                                             BLOCK=min(2048, triton.next_power_of_2(cols)))
        return y
