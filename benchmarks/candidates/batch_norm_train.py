"""An honest batch norm in training mode for benchmarks/problems/batch_norm_train.py: the batch
statistics by torch (two passes, float32), the normalization and affine map in one Triton kernel,
the running statistics updated as nn.BatchNorm2d does."""
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def normalize_kernel(x_ptr, out_ptr, scale_ptr, shift_ptr, plane, channels, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)  # one (sample, channel) plane per row of programs
    c = row % channels
    offs = tl.program_id(1).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < plane
    x = tl.load(x_ptr + row * plane + offs, mask=mask)
    tl.store(out_ptr + row * plane + offs, x * tl.load(scale_ptr + c) + tl.load(shift_ptr + c), mask=mask)


class ModelNew(nn.Module):
    def __init__(self, channels: int):
        super().__init__()
        self.bn = nn.BatchNorm2d(channels)

    def forward(self, x):
        x = x.contiguous()
        bn = self.bn
        mean = x.mean(dim=(0, 2, 3))
        var = (x - mean[None, :, None, None]).square().mean(dim=(0, 2, 3))
        count = x.numel() // x.shape[1]
        with torch.no_grad():
            bn.num_batches_tracked += 1
            bn.running_mean.mul_(1 - bn.momentum).add_(bn.momentum * mean)
            bn.running_var.mul_(1 - bn.momentum).add_(bn.momentum * var * count / max(count - 1, 1))
        scale = bn.weight / torch.sqrt(var + bn.eps)
        shift = bn.bias - mean * scale
        out = torch.empty_like(x)
        plane = x.shape[2] * x.shape[3]
        normalize_kernel[(x.shape[0] * x.shape[1], triton.cdiv(plane, 4096))](
            x, out, scale.contiguous(), shift.contiguous(), plane, x.shape[1], BLOCK=4096)
        return out
