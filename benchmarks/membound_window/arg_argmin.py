"""argmin over a middle dim: torch.argmin(x, dim=1) of [batch, dim1, dim2], int64 indices.

SUITE_SCALE=small gives a CPU test size; the default is the published size (a GPU's).
"""
import os

import torch
import torch.nn as nn

SMALL = os.environ.get("SUITE_SCALE") == "small"
batch_size, dim1, dim2 = (3, 60, 45) if SMALL else (128, 4096, 4095)
dim = 1


class Model(nn.Module):
    def __init__(self, dim: int):
        super().__init__()
        self.dim = dim

    def forward(self, x):
        return torch.argmin(x, dim=self.dim)


def get_inputs():
    return [torch.randn(batch_size, dim1, dim2)]


def get_init_inputs():
    return [dim]
