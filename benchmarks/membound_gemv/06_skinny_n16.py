"""A product with 16 columns: (65536 x 4096, 1 GiB) @ (4096 x 16)."""
import torch
import torch.nn as nn
import torch.nn.functional as F

M = 65536
K = 4096
N = 16


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
