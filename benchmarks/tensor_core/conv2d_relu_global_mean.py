"""Level-2 chain: 3x3 convolution, ReLU, a global average over the spatial dims (one value per channel)."""
import os

import torch
import torch.nn as nn
import torch.nn.functional as F

SMALL = os.environ.get("SUITE_SCALE") == "small"  # a CPU test size
batch_size = 2 if SMALL else 128
in_channels = 3
out_channels = 64
height = width = 10 if SMALL else 32


class Model(nn.Module):
    def __init__(self, in_ch: int, out_ch: int):
        super().__init__()
        self.conv = nn.Conv2d(in_ch, out_ch, 3)

    def forward(self, x):
        x = torch.relu(self.conv(x))
        return torch.mean(x, dim=[2, 3], keepdim=True)


def get_inputs():
    return [torch.randn(batch_size, in_channels, height, width)]


def get_init_inputs():
    return [in_channels, out_channels]
