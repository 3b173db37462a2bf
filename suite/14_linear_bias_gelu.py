"""Matmul with an epilogue: y = gelu(x @ W^T + b), a linear layer followed by GELU.

SUITE_SCALE=small gives a CPU test size; the default size is meant for a GPU.
"""
import os

import torch
import torch.nn as nn
import torch.nn.functional as F

SMALL = os.environ.get("SUITE_SCALE") == "small"
BATCH, IN, OUT = (16, 32, 48) if SMALL else (4096, 4096, 4096)


class Model(nn.Module):
    def __init__(self, in_features: int, out_features: int):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)

    def forward(self, x):
        return F.gelu(self.linear(x))


def get_inputs():
    return [torch.randn(BATCH, IN)]


def get_init_inputs():
    return [IN, OUT]
