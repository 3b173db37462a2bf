"""Transposed 3-d convolution: 3x5x3 kernel, stride 2, padding (1, 2, 1), output_padding 1,
32 -> 64 channels in 4 groups, 16x32x32 volumes to 32x64x64."""
import os

import torch
import torch.nn as nn
import torch.nn.functional as F

SMALL = os.environ.get("SUITE_SCALE") == "small"  # a CPU test size
batch_size = 2 if SMALL else 8
in_channels = 32
out_channels = 64
groups = 4
depth = 6 if SMALL else 16
height = width = 10 if SMALL else 32


class Model(nn.Module):
    def __init__(self, in_ch: int, out_ch: int, g: int):
        super().__init__()
        self.conv = nn.ConvTranspose3d(in_ch, out_ch, (3, 5, 3), stride=2, padding=(1, 2, 1), output_padding=1,
                                       groups=g)

    def forward(self, x):
        return self.conv(x)


def get_inputs():
    return [torch.randn(batch_size, in_channels, depth, height, width)]


def get_init_inputs():
    return [in_channels, out_channels, groups]
