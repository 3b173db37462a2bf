"""2-d max pooling: nn.MaxPool2d(4, stride 1, padding 1).

SUITE_SCALE=small gives a CPU test size; the default is the published size (a GPU's).
"""
import os

import torch
import torch.nn as nn

SMALL = os.environ.get("SUITE_SCALE") == "small"
batch_size, channels, height, width = (2, 3, 40, 36) if SMALL else (32, 64, 512, 512)
kernel_size, stride, padding = 4, 1, 1


class Model(nn.Module):
    def __init__(self, kernel_size: int, stride: int, padding: int):
        super().__init__()
        self.pool = nn.MaxPool2d(kernel_size=kernel_size, stride=stride, padding=padding)

    def forward(self, x):
        return self.pool(x)


def get_inputs():
    return [torch.randn(batch_size, channels, height, width)]


def get_init_inputs():
    return [kernel_size, stride, padding]
