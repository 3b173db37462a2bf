"""A long K at KernelBench's published size (level 1, problem 6): (256 x 524288) @ (524288 x 256), split-K."""
import torch
import torch.nn as nn
import torch.nn.functional as F

M = 256
N = 256
K = 131072 * 4


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
