"""Masked cumulative sum: cumsum(x * mask) with a bool mask input.

SUITE_SCALE=small gives a CPU test size; the default is the published size (a GPU's).
"""
import os

import torch
import torch.nn as nn

SMALL = os.environ.get("SUITE_SCALE") == "small"
batch_size, input_size = (6, 500) if SMALL else (32768, 32768)
dim = 1


class Model(nn.Module):
    def __init__(self, dim: int):
        super().__init__()
        self.dim = dim

    def forward(self, x, mask):
        return torch.cumsum(x * mask, dim=self.dim)


def get_inputs():
    return [torch.randn(batch_size, input_size), torch.randint(0, 2, (batch_size, input_size)).bool()]


def get_init_inputs():
    return [dim]
