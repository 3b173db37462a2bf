"""A row vector on the left: x (1 x 16384) @ A (16384 x 32768, 2 GiB), A read across its rows."""
import os

import torch
import torch.nn as nn
import torch.nn.functional as F

SMALL = os.environ.get("SUITE_SCALE") == "small"  # a CPU test size
K = 300 if SMALL else 16384
N = 200 if SMALL else 32768


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        pass

    def forward(self, x, A):
        return torch.matmul(x, A)


def get_inputs():
    return [torch.randn(1, K), torch.randn(K, N)]


def get_init_inputs():
    return []
