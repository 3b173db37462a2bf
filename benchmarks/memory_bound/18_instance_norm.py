"""Instance norm: a reduction over (H, W) of each sample and channel.

Issue 18's measurement set (memory-bound half of the built-in policy), written in KernelBench's
style at KernelBench's published size; SUITE_SCALE=small gives a CPU test size.
"""
import os

import torch
import torch.nn as nn

SMALL = os.environ.get("SUITE_SCALE") == "small"

BATCH, FEATURES, DIM1, DIM2 = (2, 4, 16, 18) if SMALL else (112, 64, 512, 512)


class Model(nn.Module):
    def __init__(self, num_features: int):
        super().__init__()
        self.norm = nn.InstanceNorm2d(num_features=num_features)

    def forward(self, x):
        return self.norm(x)


def get_inputs():
    return [torch.randn(BATCH, FEATURES, DIM1, DIM2)]


def get_init_inputs():
    return [FEATURES]
