"""Norm: each row divided by its Euclidean length, y = x / max(||x||, 1e-12).

SUITE_SCALE=small gives a CPU test size; the default size is meant for a GPU.
"""
import os

import torch
import torch.nn as nn

SMALL = os.environ.get("SUITE_SCALE") == "small"
ROWS, COLS = (16, 80) if SMALL else (32768, 2048)


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return x / x.norm(dim=-1, keepdim=True).clamp_min(1e-12)


def get_inputs():
    return [torch.randn(ROWS, COLS)]


def get_init_inputs():
    return []
