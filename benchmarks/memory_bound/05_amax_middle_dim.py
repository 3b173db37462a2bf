"""Max over the middle dim of a (batch, dim1, dim2) tensor.

Issue 18's measurement set (memory-bound half of the built-in policy), written in KernelBench's
style at KernelBench's published size; SUITE_SCALE=small gives a CPU test size.
"""
import os

import torch
import torch.nn as nn

SMALL = os.environ.get("SUITE_SCALE") == "small"

BATCH, DIM1, DIM2 = (4, 33, 65) if SMALL else (128, 4096, 4095)


class Model(nn.Module):
    def __init__(self, dim: int):
        super().__init__()
        self.dim = dim

    def forward(self, x):
        return torch.amax(x, dim=self.dim)


def get_inputs():
    return [torch.randn(BATCH, DIM1, DIM2)]


def get_init_inputs():
    return [1]
