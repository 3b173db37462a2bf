"""Depthwise 3-d convolution: 3x3x3, 32 channels, padding 1, over 32x64x64 volumes."""
import os

import torch
import torch.nn as nn
import torch.nn.functional as F

SMALL = os.environ.get("SUITE_SCALE") == "small"  # a CPU test size
batch_size = 2 if SMALL else 8
channels = 32
depth = 6 if SMALL else 32
height = width = 10 if SMALL else 64


class Model(nn.Module):
    def __init__(self, ch: int):
        super().__init__()
        self.conv = nn.Conv3d(ch, ch, 3, padding=1, groups=ch, bias=False)

    def forward(self, x):
        return self.conv(x)


def get_inputs():
    return [torch.randn(batch_size, channels, depth, height, width)]


def get_init_inputs():
    return [channels]
