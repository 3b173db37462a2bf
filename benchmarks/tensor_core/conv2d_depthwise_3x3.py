"""Depthwise 2-d convolution (groups == channels): 3x3, padding 1, 64 channels of 256x256."""
import os

import torch
import torch.nn as nn
import torch.nn.functional as F

SMALL = os.environ.get("SUITE_SCALE") == "small"  # a CPU test size
batch_size = 2 if SMALL else 16
channels = 64
kernel_size = 3
height = width = 10 if SMALL else 256


class Model(nn.Module):
    def __init__(self, ch: int, k: int):
        super().__init__()
        self.conv = nn.Conv2d(ch, ch, k, padding=k // 2, groups=ch, bias=False)

    def forward(self, x):
        return self.conv(x)


def get_inputs():
    return [torch.randn(batch_size, channels, height, width)]


def get_init_inputs():
    return [channels, kernel_size]
