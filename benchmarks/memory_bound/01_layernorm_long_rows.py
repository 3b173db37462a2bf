"""Layer norm over the trailing (features, dim1, dim2): rows of 4M elements, 16 of them.

Issue 18's measurement set (memory-bound half of the built-in policy), written in KernelBench's
style at KernelBench's published size; SUITE_SCALE=small gives a CPU test size.
"""
import os

import torch
import torch.nn as nn

SMALL = os.environ.get("SUITE_SCALE") == "small"

BATCH, FEATURES, DIM1, DIM2 = (4, 4, 8, 16) if SMALL else (16, 64, 256, 256)


class Model(nn.Module):
    def __init__(self, normalized_shape):
        super().__init__()
        self.norm = nn.LayerNorm(normalized_shape)

    def forward(self, x):
        return self.norm(x)


def get_inputs():
    return [torch.randn(BATCH, FEATURES, DIM1, DIM2)]


def get_init_inputs():
    return [(FEATURES, DIM1, DIM2)]
