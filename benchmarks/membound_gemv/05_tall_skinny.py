"""Tall-skinny product at KernelBench's published size (level 1, problem 9): (32768 x 32) @ (32 x 32768), a 4 GiB output."""
import torch
import torch.nn as nn
import torch.nn.functional as F

M = 16384 * 2
N = 16 * 2


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        pass

    def forward(self, A, B):
        return torch.matmul(A, B)


def get_inputs():
    return [torch.randn(M, N), torch.randn(N, M)]


def get_init_inputs():
    return []
