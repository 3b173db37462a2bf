"""Reduction: the sum of each row, scaled: y[i] = scale * sum_j x[i, j].

SUITE_SCALE=small gives a CPU test size; the default size is meant for a GPU.
"""
import os

import torch
import torch.nn as nn

SMALL = os.environ.get("SUITE_SCALE") == "small"
ROWS, COLS = (16, 100) if SMALL else (8192, 8192)


class Model(nn.Module):
    def __init__(self, scale: float):
        super().__init__()
        self.scale = scale

    def forward(self, x):
        return x.sum(dim=-1) * self.scale


def get_inputs():
    return [torch.randn(ROWS, COLS)]


def get_init_inputs():
    return [0.125]
