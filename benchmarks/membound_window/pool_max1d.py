"""Max pooling over sequences with dilation: nn.MaxPool1d(8, stride 1, padding 4, dilation 3).

SUITE_SCALE=small gives a CPU test size; the default is the published size (a GPU's).
"""
import os

import torch
import torch.nn as nn

SMALL = os.environ.get("SUITE_SCALE") == "small"
batch_size, features, sequence_length = (4, 6, 300) if SMALL else (64, 192, 65536)
kernel_size, stride, padding, dilation = 8, 1, 4, 3


class Model(nn.Module):
    def __init__(self, kernel_size: int, stride: int, padding: int, dilation: int):
        super().__init__()
        self.pool = nn.MaxPool1d(kernel_size=kernel_size, stride=stride, padding=padding, dilation=dilation)

    def forward(self, x):
        return self.pool(x)


def get_inputs():
    return [torch.randn(batch_size, features, sequence_length)]


def get_init_inputs():
    return [kernel_size, stride, padding, dilation]
