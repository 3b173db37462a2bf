"""2-d convolution with an asymmetric 3x5 kernel, stride (2, 1), padding (1, 4), dilation (2, 2) on a 128x256 input."""
import os

import torch
import torch.nn as nn
import torch.nn.functional as F

SMALL = os.environ.get("SUITE_SCALE") == "small"  # a CPU test size
batch_size = 2 if SMALL else 16
in_channels = 32
out_channels = 64
height = 10 if SMALL else 128
width = 11 if SMALL else 256


class Model(nn.Module):
    def __init__(self, in_ch: int, out_ch: int):
        super().__init__()
        self.conv = nn.Conv2d(in_ch, out_ch, (3, 5), stride=(2, 1), padding=(1, 4), dilation=(2, 2))

    def forward(self, x):
        return self.conv(x)


def get_inputs():
    return [torch.randn(batch_size, in_channels, height, width)]


def get_init_inputs():
    return [in_channels, out_channels]
