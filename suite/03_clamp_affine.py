"""Elementwise chain over three inputs: y = clamp(x * a + b, -1, 1).

SUITE_SCALE=small gives a CPU test size; the default size is meant for a GPU.
"""
import os

import torch
import torch.nn as nn

SMALL = os.environ.get("SUITE_SCALE") == "small"
N = 1024 if SMALL else 32 * 1024 * 1024


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x, a, b):
        return torch.clamp(x * a + b, -1.0, 1.0)


def get_inputs():
    return [torch.randn(N), torch.randn(N), torch.randn(N)]


def get_init_inputs():
    return []
