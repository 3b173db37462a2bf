"""2-d average pooling with a large window: nn.AvgPool2d(11) (stride 11, no padding).

SUITE_SCALE=small gives a CPU test size; the default is the published size (a GPU's).
"""
import os

import torch
import torch.nn as nn

SMALL = os.environ.get("SUITE_SCALE") == "small"
batch_size, channels, height, width = (2, 3, 50, 46) if SMALL else (16, 64, 2048, 2048)
kernel_size = 11


class Model(nn.Module):
    def __init__(self, kernel_size: int):
        super().__init__()
        self.pool = nn.AvgPool2d(kernel_size=kernel_size)

    def forward(self, x):
        return self.pool(x)


def get_inputs():
    return [torch.randn(batch_size, channels, height, width)]


def get_init_inputs():
    return [kernel_size]
