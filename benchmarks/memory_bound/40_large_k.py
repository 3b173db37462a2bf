"""A long K at KernelBench's published size (level 1, problem 6): (256 x 524288) @ (524288 x 256), split-K."""
import os

import torch
import torch.nn as nn
import torch.nn.functional as F

SMALL = os.environ.get("SUITE_SCALE") == "small"  # a CPU test size
M = 32 if SMALL else 256
N = 32 if SMALL else 256
K = 3000 if SMALL else 131072 * 4


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
