"""Norm, a single op: layer normalization over the last dimension, with weight and bias.

SUITE_SCALE=small gives a CPU test size; the default size is meant for a GPU.
"""
import os

import torch
import torch.nn as nn

SMALL = os.environ.get("SUITE_SCALE") == "small"
ROWS, COLS = (16, 96) if SMALL else (16384, 4096)


class Model(nn.Module):
    def __init__(self, cols: int):
        super().__init__()
        self.norm = nn.LayerNorm(cols)
        with torch.no_grad():  # not the trivial ones and zeros
            self.norm.weight.normal_(1.0, 0.1)
            self.norm.bias.normal_(0.0, 0.1)

    def forward(self, x):
        return self.norm(x)


def get_inputs():
    return [torch.randn(ROWS, COLS)]


def get_init_inputs():
    return [COLS]
