"""Elementwise chain with a residual: y = (leaky_relu(x, 0.1) + residual) * 0.5.

SUITE_SCALE=small gives a CPU test size; the default size is meant for a GPU.
"""
import os

import torch
import torch.nn as nn
import torch.nn.functional as F

SMALL = os.environ.get("SUITE_SCALE") == "small"
SHAPE = (4, 8, 32) if SMALL else (64, 512, 1024)


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x, residual):
        return (F.leaky_relu(x, 0.1) + residual) * 0.5


def get_inputs():
    return [torch.randn(*SHAPE), torch.randn(*SHAPE)]


def get_init_inputs():
    return []
