"""Pointwise (1x1) 2-d convolution: 64 channels in, 128 out, 224x224 images."""
import os

import torch
import torch.nn as nn
import torch.nn.functional as F

SMALL = os.environ.get("SUITE_SCALE") == "small"  # a CPU test size
batch_size = 2 if SMALL else 16
in_channels = 64
out_channels = 128
height = width = 10 if SMALL else 224


class Model(nn.Module):
    def __init__(self, in_ch: int, out_ch: int):
        super().__init__()
        self.conv = nn.Conv2d(in_ch, out_ch, 1)

    def forward(self, x):
        return self.conv(x)


def get_inputs():
    return [torch.randn(batch_size, in_channels, height, width)]


def get_init_inputs():
    return [in_channels, out_channels]
