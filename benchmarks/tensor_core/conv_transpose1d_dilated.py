"""Transposed 1-d convolution: kernel 5, stride 2, padding 4, dilation 3, 32 -> 64 channels,
length 2048."""
import os

import torch
import torch.nn as nn
import torch.nn.functional as F

SMALL = os.environ.get("SUITE_SCALE") == "small"  # a CPU test size
batch_size = 2 if SMALL else 16
in_channels = 32
out_channels = 64
length = 40 if SMALL else 2048


class Model(nn.Module):
    def __init__(self, in_ch: int, out_ch: int):
        super().__init__()
        self.conv = nn.ConvTranspose1d(in_ch, out_ch, 5, stride=2, padding=4, dilation=3)

    def forward(self, x):
        return self.conv(x)


def get_inputs():
    return [torch.randn(batch_size, in_channels, length)]


def get_init_inputs():
    return [in_channels, out_channels]
