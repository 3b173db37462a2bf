"""Average pooling over sequences: nn.AvgPool1d(8, stride 1, padding 4), padding counted.

SUITE_SCALE=small gives a CPU test size; the default is the published size (a GPU's).
"""
import os

import torch
import torch.nn as nn

SMALL = os.environ.get("SUITE_SCALE") == "small"
batch_size, in_channels, input_length = (4, 6, 300) if SMALL else (64, 128, 65536)
kernel_size, stride, padding = 8, 1, 4


class Model(nn.Module):
    def __init__(self, kernel_size: int, stride: int, padding: int):
        super().__init__()
        self.pool = nn.AvgPool1d(kernel_size=kernel_size, stride=stride, padding=padding)

    def forward(self, x):
        return self.pool(x)


def get_inputs():
    return [torch.randn(batch_size, in_channels, input_length)]


def get_init_inputs():
    return [kernel_size, stride, padding]
