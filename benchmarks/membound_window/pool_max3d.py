"""3-d max pooling: nn.MaxPool3d(3, stride 2, padding 1).

SUITE_SCALE=small gives a CPU test size; the default is the published size (a GPU's).
"""
import os

import torch
import torch.nn as nn

SMALL = os.environ.get("SUITE_SCALE") == "small"
batch_size, channels, dim1, dim2, dim3 = (2, 3, 12, 10, 14) if SMALL else (16, 32, 128, 128, 128)
kernel_size, stride, padding = 3, 2, 1


class Model(nn.Module):
    def __init__(self, kernel_size: int, stride: int, padding: int):
        super().__init__()
        self.pool = nn.MaxPool3d(kernel_size=kernel_size, stride=stride, padding=padding)

    def forward(self, x):
        return self.pool(x)


def get_inputs():
    return [torch.randn(batch_size, channels, dim1, dim2, dim3)]


def get_init_inputs():
    return [kernel_size, stride, padding]
