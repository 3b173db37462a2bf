"""3-d convolution with an asymmetric kernel (3x5x7), stride (1, 2, 2), padding (1, 2, 3), 16 -> 32
channels over 16x128x128 volumes, with bias."""
import os

import torch
import torch.nn as nn
import torch.nn.functional as F

SMALL = os.environ.get("SUITE_SCALE") == "small"  # a CPU test size
batch_size = 2 if SMALL else 8
in_channels = 16
out_channels = 32
depth = 6 if SMALL else 16
height = width = 10 if SMALL else 128
kernel_size = (3, 5, 7)


class Model(nn.Module):
    def __init__(self, in_ch: int, out_ch: int, kernel: tuple):
        super().__init__()
        self.conv = nn.Conv3d(in_ch, out_ch, kernel, stride=(1, 2, 2), padding=(1, 2, 3))

    def forward(self, x):
        return self.conv(x)


def get_inputs():
    return [torch.randn(batch_size, in_channels, depth, height, width)]


def get_init_inputs():
    return [in_channels, out_channels, kernel_size]
