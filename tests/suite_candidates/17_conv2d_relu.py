"""Known-correct, multi-op: the convolution left to torch (no bias), bias and ReLU fused in Triton."""
import torch
import torch.nn as nn
import triton
import triton.language as tl
import torch.nn.functional as F


@triton.jit
def channel_tail_kernel(y_ptr, bias_ptr, out_ptr, n, hw, channels, ACT: tl.constexpr, BLOCK: tl.constexpr):
    # out = act(y + bias[channel]); ACT 1: relu, 2: 2 * sigmoid
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    c = (offs // hw) % channels
    v = tl.load(y_ptr + offs, mask=mask) + tl.load(bias_ptr + c, mask=mask)
    if ACT == 1:
        v = tl.maximum(v, 0.0)
    if ACT == 2:
        v = tl.sigmoid(v) * 2.0
    tl.store(out_ptr + offs, v, mask=mask)


def channel_tail(y, bias, act):
    y = y.contiguous()
    out = torch.empty_like(y)
    n = y.numel()
    channel_tail_kernel[(triton.cdiv(n, 1024),)](y, bias, out, n, y.shape[2] * y.shape[3], y.shape[1],
                                                  ACT=act, BLOCK=1024)
    return out


class ModelNew(nn.Module):
    def __init__(self, c_in: int, c_out: int):
        super().__init__()
        self.conv = nn.Conv2d(c_in, c_out, kernel_size=3, padding=1)

    def forward(self, x):
        return channel_tail(F.conv2d(x, self.conv.weight, padding=1), self.conv.bias, act=1)
