"""Level-2 chain: 3x3 convolution, scaled by a constructor factor, clamped to [0, 1]."""
import os

import torch
import torch.nn as nn
import torch.nn.functional as F

SMALL = os.environ.get("SUITE_SCALE") == "small"  # a CPU test size
batch_size = 2 if SMALL else 128
in_channels = 3
out_channels = 64
height = width = 10 if SMALL else 64
scale = 0.5


class Model(nn.Module):
    def __init__(self, in_ch: int, out_ch: int, s: float):
        super().__init__()
        self.conv = nn.Conv2d(in_ch, out_ch, 3, padding=1)
        self.scale = s

    def forward(self, x):
        return torch.clamp(self.conv(x) * self.scale, 0.0, 1.0)


def get_inputs():
    return [torch.randn(batch_size, in_channels, height, width)]


def get_init_inputs():
    return [in_channels, out_channels, scale]
