"""Softmax over rows of 393216 elements, 4096 rows.

Issue 18's measurement set (memory-bound half of the built-in policy), written in KernelBench's
style at KernelBench's published size; SUITE_SCALE=small gives a CPU test size.
"""
import os

import torch
import torch.nn as nn

SMALL = os.environ.get("SUITE_SCALE") == "small"

ROWS, COLS = (8, 3000) if SMALL else (4096, 393216)


class Model(nn.Module):
    def forward(self, x):
        return torch.softmax(x, dim=1)


def get_inputs():
    return [torch.randn(ROWS, COLS)]


def get_init_inputs():
    return []
