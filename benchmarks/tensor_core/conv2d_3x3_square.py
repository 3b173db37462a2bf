"""Standard 2-d convolution: a 3x3 kernel over square 256x256 images, 3 channels in, 64 out."""
import os

import torch
import torch.nn as nn
import torch.nn.functional as F

SMALL = os.environ.get("SUITE_SCALE") == "small"  # a CPU test size
batch_size = 2 if SMALL else 16
in_channels = 3
out_channels = 64
kernel_size = 3
height = width = 10 if SMALL else 256


class Model(nn.Module):
    def __init__(self, in_ch: int, out_ch: int, k: int):
        super().__init__()
        self.conv = nn.Conv2d(in_ch, out_ch, k, bias=False)

    def forward(self, x):
        return self.conv(x)


def get_inputs():
    return [torch.randn(batch_size, in_channels, height, width)]


def get_init_inputs():
    return [in_channels, out_channels, kernel_size]
