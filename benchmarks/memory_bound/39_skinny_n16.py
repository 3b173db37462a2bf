"""A product with 16 columns: (65536 x 4096, 1 GiB) @ (4096 x 16)."""
import os

import torch
import torch.nn as nn
import torch.nn.functional as F

SMALL = os.environ.get("SUITE_SCALE") == "small"  # a CPU test size
M = 500 if SMALL else 65536
K = 64 if SMALL else 4096
N = 16 if SMALL else 16


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        pass

    def forward(self, A, B):
        return torch.matmul(A, B)


def get_inputs():
    return [torch.randn(M, K), torch.randn(K, N)]


def get_init_inputs():
    return []
