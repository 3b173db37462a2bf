"""Matmul with an epilogue: y = (a @ b) * scale + c, a scaled product plus a residual.

SUITE_SCALE=small gives a CPU test size; the default size is meant for a GPU.
"""
import os

import torch
import torch.nn as nn

SMALL = os.environ.get("SUITE_SCALE") == "small"
M, K, N = (32, 48, 16) if SMALL else (4096, 2048, 4096)


class Model(nn.Module):
    def __init__(self, scale: float):
        super().__init__()
        self.scale = scale

    def forward(self, a, b, c):
        return torch.matmul(a, b) * self.scale + c


def get_inputs():
    return [torch.randn(M, K), torch.randn(K, N), torch.randn(M, N)]


def get_init_inputs():
    return [0.5]
