"""Norm: RMS normalization, y = x / sqrt(mean(x^2) + eps) * weight, over the last dimension.

SUITE_SCALE=small gives a CPU test size; the default size is meant for a GPU.
"""
import os

import torch
import torch.nn as nn

SMALL = os.environ.get("SUITE_SCALE") == "small"
SHAPE = (4, 8, 64) if SMALL else (16, 2048, 4096)


class Model(nn.Module):
    def __init__(self, dim: int, eps: float):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(1.0 + 0.1 * torch.randn(dim))

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(dim=-1, keepdim=True) + self.eps) * self.weight


def get_inputs():
    return [torch.randn(*SHAPE)]


def get_init_inputs():
    return [SHAPE[-1], 1e-6]
