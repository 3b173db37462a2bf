"""Honest (tests/gpu_problems/transient_workspace.py): its kernel needs a transient 45% of the
card during each call, and gives it back to the device before returning. Judged `ok` only if the
reference worker does not keep its own 60% cached meanwhile."""
import torch
import torch.nn as nn
import triton
import triton.language as tl

SHARE = 0.45


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
        total = torch.cuda.get_device_properties(x.device).total_memory
        workspace = torch.empty(int(total * SHARE), dtype=torch.uint8, device=x.device)
        workspace[:1].zero_()
        del workspace
        torch.cuda.empty_cache()
        out = torch.empty_like(x)
        n = x.numel()
        relu_add_scale_kernel[(triton.cdiv(n, 1024),)](x, y, out, n, self.scale, BLOCK=1024)
        return out
