"""Level-2 chain: 3x3 convolution, GroupNorm over 8 groups, a learned per-channel scale."""
import os

import torch
import torch.nn as nn
import torch.nn.functional as F

SMALL = os.environ.get("SUITE_SCALE") == "small"  # a CPU test size
batch_size = 2 if SMALL else 128
in_channels = 3
out_channels = 16
groups = 8
height = width = 10 if SMALL else 32
scale_shape = (out_channels, 1, 1)


class Model(nn.Module):
    def __init__(self, in_ch: int, out_ch: int, g: int, shape: tuple):
        super().__init__()
        self.conv = nn.Conv2d(in_ch, out_ch, 3)
        self.norm = nn.GroupNorm(g, out_ch)
        self.scale = nn.Parameter(torch.randn(shape))

    def forward(self, x):
        x = self.conv(x)
        x = self.norm(x)
        return x * self.scale


def get_inputs():
    return [torch.randn(batch_size, in_channels, height, width)]


def get_init_inputs():
    return [in_channels, out_channels, groups, scale_shape]
