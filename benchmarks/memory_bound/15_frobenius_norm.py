"""Frobenius normalization: x divided by the norm of all its elements (a global reduction, then elementwise).

Issue 18's measurement set (memory-bound half of the built-in policy), written in KernelBench's
style at KernelBench's published size; SUITE_SCALE=small gives a CPU test size.
"""
import os

import torch
import torch.nn as nn

SMALL = os.environ.get("SUITE_SCALE") == "small"

BATCH, FEATURES, DIM1, DIM2 = (2, 4, 16, 18) if SMALL else (112, 64, 512, 512)


class Model(nn.Module):
    def forward(self, x):
        return x / torch.norm(x, p="fro")


def get_inputs():
    return [torch.randn(BATCH, FEATURES, DIM1, DIM2)]


def get_init_inputs():
    return []
