"""Tall-skinny product: (M, N) @ (N, M) with N = 32.

Issue 18's measurement set (memory-bound half of the built-in policy), written in KernelBench's
style at KernelBench's published size; SUITE_SCALE=small gives a CPU test size.
"""
import os

import torch
import torch.nn as nn

SMALL = os.environ.get("SUITE_SCALE") == "small"

M, N = (300, 8) if SMALL else (32768, 32)


class Model(nn.Module):
    def forward(self, a, b):
        return torch.matmul(a, b)


def get_inputs():
    return [torch.rand(M, N), torch.rand(N, M)]


def get_init_inputs():
    return []
