"""Level-2 chain: 5x5 convolution with stride 2, Hardtanh, then GELU."""
import os

import torch
import torch.nn as nn
import torch.nn.functional as F

SMALL = os.environ.get("SUITE_SCALE") == "small"  # a CPU test size
batch_size = 2 if SMALL else 64
in_channels = 16
out_channels = 64
height = width = 10 if SMALL else 128


class Model(nn.Module):
    def __init__(self, in_ch: int, out_ch: int):
        super().__init__()
        self.conv = nn.Conv2d(in_ch, out_ch, 5, stride=2, padding=2)
        self.act = nn.Hardtanh(-1.0, 1.0)

    def forward(self, x):
        return F.gelu(self.act(self.conv(x)))


def get_inputs():
    return [torch.randn(batch_size, in_channels, height, width)]


def get_init_inputs():
    return [in_channels, out_channels]
