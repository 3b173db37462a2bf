"""Exclusive cumulative sum, the form KernelBench writes: a zero column concatenated in front
along the dim, the last entry of dim 0 dropped, then cumsum.

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

    def forward(self, x):
        zeros = torch.zeros_like(x.select(self.dim, 0).unsqueeze(self.dim))
        return torch.cumsum(torch.cat((zeros, x), dim=self.dim)[:-1], dim=self.dim)


def get_inputs():
    return [torch.randn(batch_size, input_size)]


def get_init_inputs():
    return [dim]
