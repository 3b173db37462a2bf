"""Cumulative sum of the elements a boolean mask keeps.

Issue 18's measurement set (memory-bound half of the built-in policy), written in KernelBench's
style at KernelBench's published size; SUITE_SCALE=small gives a CPU test size.
"""
import os

import torch
import torch.nn as nn

SMALL = os.environ.get("SUITE_SCALE") == "small"

BATCH, DIM = (8, 700) if SMALL else (32768, 32768)


class Model(nn.Module):
    def __init__(self, dim: int):
        super().__init__()
        self.dim = dim

    def forward(self, x, mask):
        return torch.cumsum(x * mask, dim=self.dim)


def get_inputs():
    return [torch.randn(BATCH, DIM), torch.randint(0, 2, (BATCH, DIM)).bool()]


def get_init_inputs():
    return [1]
