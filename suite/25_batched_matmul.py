"""Hard to beat: a batched matrix product, a single op, y[i] = a[i] @ b[i].

SUITE_SCALE=small gives a CPU test size; the default size is meant for a GPU.
"""
import os

import torch
import torch.nn as nn

SMALL = os.environ.get("SUITE_SCALE") == "small"
BATCH, M, K, N = (3, 16, 24, 16) if SMALL else (64, 512, 256, 512)


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, a, b):
        return torch.bmm(a, b)


def get_inputs():
    return [torch.randn(BATCH, M, K), torch.randn(BATCH, K, N)]


def get_init_inputs():
    return []
