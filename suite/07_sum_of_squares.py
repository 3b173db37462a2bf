"""Reduction to a scalar: the sum of squares of every element (a 0-dim output).

SUITE_SCALE=small gives a CPU test size; the default size is meant for a GPU.
"""
import os

import torch
import torch.nn as nn

SMALL = os.environ.get("SUITE_SCALE") == "small"
N = 3000 if SMALL else 64 * 1024 * 1024


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return (x * x).sum()


def get_inputs():
    return [torch.randn(N)]


def get_init_inputs():
    return []
