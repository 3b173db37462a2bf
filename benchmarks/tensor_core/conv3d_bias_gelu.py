"""Level-2 chain: 3-d convolution (3x3x3), a per-channel bias parameter added, GELU."""
import os

import torch
import torch.nn as nn
import torch.nn.functional as F

SMALL = os.environ.get("SUITE_SCALE") == "small"  # a CPU test size
batch_size = 2 if SMALL else 32
in_channels = 8
out_channels = 32
depth = 6 if SMALL else 16
height = width = 10 if SMALL else 32
bias_shape = (32, 1, 1, 1)


class Model(nn.Module):
    def __init__(self, in_ch: int, out_ch: int, bias: tuple):
        super().__init__()
        self.conv = nn.Conv3d(in_ch, out_ch, 3)
        self.bias = nn.Parameter(torch.randn(bias))

    def forward(self, x):
        return F.gelu(self.conv(x) + self.bias)


def get_inputs():
    return [torch.randn(batch_size, in_channels, depth, height, width)]


def get_init_inputs():
    return [in_channels, out_channels, bias_shape]
