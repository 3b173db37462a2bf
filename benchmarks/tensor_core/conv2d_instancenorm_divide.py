"""Level-2 chain: 3x3 convolution, InstanceNorm2d, division by a constructor constant."""
import os

import torch
import torch.nn as nn
import torch.nn.functional as F

SMALL = os.environ.get("SUITE_SCALE") == "small"  # a CPU test size
batch_size = 2 if SMALL else 128
in_channels = 3
out_channels = 16
height = width = 10 if SMALL else 32
divisor = 2.0


class Model(nn.Module):
    def __init__(self, in_ch: int, out_ch: int, d: float):
        super().__init__()
        self.conv = nn.Conv2d(in_ch, out_ch, 3)
        self.norm = nn.InstanceNorm2d(out_ch)
        self.divisor = d

    def forward(self, x):
        x = self.norm(self.conv(x))
        return x / self.divisor


def get_inputs():
    return [torch.randn(batch_size, in_channels, height, width)]


def get_init_inputs():
    return [in_channels, out_channels, divisor]
