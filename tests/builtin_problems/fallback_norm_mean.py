"""A 2D convolution, GroupNorm, then the mean over every dim but the batch (KernelBench L2 23's
shape of work, in 2D): convolution and norm in torch, the mean a reduction kernel of the draft's
own over three adjacent dims at once."""
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, in_channels: int, out_channels: int, kernel_size: int, groups: int):
        super().__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, kernel_size)
        self.norm = nn.GroupNorm(groups, out_channels)

    def forward(self, x):
        return self.norm(self.conv(x)).mean(dim=[1, 2, 3])


batch_size = 3
in_channels = 2
out_channels = 8
height = 9
width = 10


def get_inputs():
    return [torch.randn(batch_size, in_channels, height, width)]


def get_init_inputs():
    return [in_channels, out_channels, 3, 4]
