"""A matrix-vector product A @ x, x a [K, 1] matrix (the gemv plan: A streamed, rows x K chunks)."""
import torch
import torch.nn as nn

M = 48
K = 600


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, A, x):
        return torch.matmul(A, x)


def get_inputs():
    return [torch.randn(M, K), torch.randn(K, 1)]


def get_init_inputs():
    return []
