"""Matrix-vector product at KernelBench's published size (level 1, problem 4): A (2048 x 1048576, 8 GiB) @ B (1048576 x 1)."""
import torch
import torch.nn as nn
import torch.nn.functional as F

M = 256 * 8
K = 131072 * 8


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        pass

    def forward(self, A, B):
        return torch.matmul(A, B)


def get_inputs():
    return [torch.randn(M, K), torch.randn(K, 1)]


def get_init_inputs():
    return []
