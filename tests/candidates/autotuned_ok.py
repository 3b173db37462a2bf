"""Honest: relu(x + y) * scale in one Triton kernel tuned by @triton.autotune over block sizes
(on the CPU, Triton's interpreter runs every config once and keeps the first)."""
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.autotune(configs=[triton.Config({"BLOCK": 1024}), triton.Config({"BLOCK": 2048})], key=["n"])
@triton.jit
def relu_add_scale_kernel(x_ptr, y_ptr, out_ptr, n, scale, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    x = tl.load(x_ptr + offsets, mask=mask)
    y = tl.load(y_ptr + offsets, mask=mask)
    tl.store(out_ptr + offsets, tl.maximum(x + y, 0.0) * scale, mask=mask)


class ModelNew(nn.Module):
    def __init__(self, scale: float):
        super().__init__()
        self.scale = scale

    def forward(self, x, y):
        out = torch.empty_like(x)
        n = x.numel()
        relu_add_scale_kernel[lambda meta: (triton.cdiv(n, meta["BLOCK"]),)](x, y, out, n, self.scale)
        return out
