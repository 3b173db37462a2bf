"""Group norm, 8 groups, with its affine parameters: reductions over (C/G, H, W) per sample and group.

Issue 18's measurement set (memory-bound half of the built-in policy), written in KernelBench's
style at KernelBench's published size; SUITE_SCALE=small gives a CPU test size.
"""
import os

import torch
import torch.nn as nn

SMALL = os.environ.get("SUITE_SCALE") == "small"

BATCH, FEATURES, GROUPS, DIM1, DIM2 = (2, 8, 4, 16, 18) if SMALL else (112, 64, 8, 512, 512)


class Model(nn.Module):
    def __init__(self, num_features: int, num_groups: int):
        super().__init__()
        self.norm = nn.GroupNorm(num_groups=num_groups, num_channels=num_features)

    def forward(self, x):
        return self.norm(x)


def get_inputs():
    return [torch.randn(BATCH, FEATURES, DIM1, DIM2)]


def get_init_inputs():
    return [FEATURES, GROUPS]
