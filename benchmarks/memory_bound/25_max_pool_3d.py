"""Max pooling 3D, kernel 3, stride 2, padding 1.

Issue 18's measurement set (memory-bound half of the built-in policy), written in KernelBench's
style at KernelBench's published size; SUITE_SCALE=small gives a CPU test size.
"""
import os

import torch
import torch.nn as nn

SMALL = os.environ.get("SUITE_SCALE") == "small"

BATCH, CHANNELS, DEPTH, HEIGHT, WIDTH = (2, 2, 9, 10, 11) if SMALL else (16, 32, 128, 128, 128)


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.pool = nn.MaxPool3d(kernel_size=3, stride=2, padding=1)

    def forward(self, x):
        return self.pool(x)


def get_inputs():
    return [torch.randn(BATCH, CHANNELS, DEPTH, HEIGHT, WIDTH)]


def get_init_inputs():
    return []
