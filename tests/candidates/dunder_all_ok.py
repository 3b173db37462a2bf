"""Honest: relu(x + y) * scale in one Triton kernel, in a module that declares what it exports
(`__all__`) and its version (`__version__`), as library code does."""
import torch
import torch.nn as nn
import triton
import triton.language as tl

__all__ = ["ModelNew", "relu_add_scale_kernel"]
__version__ = "1.0"


@triton.jit
def relu_add_scale_kernel(x_ptr, y_ptr, out_ptr, n, scale, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    x = tl.load(x_ptr + offsets, mask=mask)
    y = tl.load(y_ptr + offsets, mask=mask)
    tl.store(out_ptr + offsets, tl.maximum(x + y, 0.0) * scale, mask=mask)


class Launch:
    """The launch geometry: a plain class with fixed fields."""
    __slots__ = ("block",)

    def __init__(self, block: int) -> None:
        self.block = block


class ModelNew(nn.Module):
    def __init__(self, scale: float):
        super().__init__()
        self.scale = scale
        self.launch = Launch(1024)

    def forward(self, x, y):
        out = torch.empty_like(x)
        n = x.numel()
        block = self.launch.block
        relu_add_scale_kernel[(triton.cdiv(n, block),)](x, y, out, n, self.scale, BLOCK=block)
        return out
