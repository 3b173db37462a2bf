"""Reduction across rows: the mean of each column, y[j] = mean_i x[i, j].

SUITE_SCALE=small gives a CPU test size; the default size is meant for a GPU.
"""
import os

import torch
import torch.nn as nn

SMALL = os.environ.get("SUITE_SCALE") == "small"
ROWS, COLS = (48, 40) if SMALL else (16384, 4096)


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return x.mean(dim=0)


def get_inputs():
    return [torch.randn(ROWS, COLS)]


def get_init_inputs():
    return []
