"""Level-2 chain: transposed 3-d convolution (3x3x3, stride 2, padding 1), times a scale, ReLU."""
import os

import torch
import torch.nn as nn
import torch.nn.functional as F

SMALL = os.environ.get("SUITE_SCALE") == "small"  # a CPU test size
batch_size = 2 if SMALL else 64
in_channels = 3
out_channels = 16
depth = 6 if SMALL else 16
height = width = 10 if SMALL else 32
scale = 0.5


class Model(nn.Module):
    def __init__(self, in_ch: int, out_ch: int, scale: float):
        super().__init__()
        self.conv = nn.ConvTranspose3d(in_ch, out_ch, 3, stride=2, padding=1)
        self.scale = scale

    def forward(self, x):
        return torch.relu(self.conv(x) * self.scale)


def get_inputs():
    return [torch.randn(batch_size, in_channels, depth, height, width)]


def get_init_inputs():
    return [in_channels, out_channels, scale]
