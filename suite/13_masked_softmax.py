"""Softmax with a boolean mask and a temperature: masked positions get probability 0.

Column 0 is never masked, so no row is empty. SUITE_SCALE=small gives a CPU test size; the
default size is meant for a GPU.
"""
import os

import torch
import torch.nn as nn

SMALL = os.environ.get("SUITE_SCALE") == "small"
ROWS, COLS = (16, 64) if SMALL else (16384, 2048)


class Model(nn.Module):
    def __init__(self, temperature: float):
        super().__init__()
        self.temperature = temperature

    def forward(self, x, mask):
        scores = (x / self.temperature).masked_fill(~mask, float("-inf"))
        return torch.softmax(scores, dim=-1)


def get_inputs():
    mask = torch.rand(ROWS, COLS) > 0.25
    mask[:, 0] = True
    return [torch.randn(ROWS, COLS), mask]


def get_init_inputs():
    return [0.7]
