"""Grouped 2-d convolution: 64 channels in 8 groups to 128 out, 3x3, stride 1, padding 1, 128x128."""
import os

import torch
import torch.nn as nn
import torch.nn.functional as F

SMALL = os.environ.get("SUITE_SCALE") == "small"  # a CPU test size
batch_size = 2 if SMALL else 32
in_channels = 64
out_channels = 128
groups = 8
height = width = 10 if SMALL else 128


class Model(nn.Module):
    def __init__(self, in_ch: int, out_ch: int, g: int):
        super().__init__()
        self.conv = nn.Conv2d(in_ch, out_ch, 3, padding=1, groups=g)

    def forward(self, x):
        return self.conv(x)


def get_inputs():
    return [torch.randn(batch_size, in_channels, height, width)]


def get_init_inputs():
    return [in_channels, out_channels, groups]
