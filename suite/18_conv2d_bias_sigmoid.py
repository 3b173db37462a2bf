"""Convolution with a fused tail: y = sigmoid(conv2d(x) + channel_bias) * 2, 3x3, no padding.

SUITE_SCALE=small gives a CPU test size; the default size is meant for a GPU.
"""
import os

import torch
import torch.nn as nn

SMALL = os.environ.get("SUITE_SCALE") == "small"
BATCH, C_IN, C_OUT, H, W = (2, 4, 6, 9, 9) if SMALL else (64, 32, 64, 64, 64)


class Model(nn.Module):
    def __init__(self, c_in: int, c_out: int):
        super().__init__()
        self.conv = nn.Conv2d(c_in, c_out, kernel_size=3, bias=False)
        self.channel_bias = nn.Parameter(torch.randn(c_out, 1, 1) * 0.1)

    def forward(self, x):
        return torch.sigmoid(self.conv(x) + self.channel_bias) * 2.0


def get_inputs():
    return [torch.randn(BATCH, C_IN, H, W)]


def get_init_inputs():
    return [C_IN, C_OUT]
