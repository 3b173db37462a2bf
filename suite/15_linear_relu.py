"""Matmul with an epilogue: y = relu(x @ W^T + b).

SUITE_SCALE=small gives a CPU test size; the default size is meant for a GPU.
"""
import os

import torch
import torch.nn as nn

SMALL = os.environ.get("SUITE_SCALE") == "small"
BATCH, IN, OUT = (24, 32, 32) if SMALL else (8192, 2048, 8192)


class Model(nn.Module):
    def __init__(self, in_features: int, out_features: int):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)

    def forward(self, x):
        return torch.relu(self.linear(x))


def get_inputs():
    return [torch.randn(BATCH, IN)]


def get_init_inputs():
    return [IN, OUT]
