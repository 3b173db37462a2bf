"""torch.matmul of a matrix and a 1-d vector (aten.mv), then ReLU: a gemv with an epilogue."""
import torch
import torch.nn as nn

M = 40
K = 520


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, A, v):
        return torch.relu(torch.matmul(A, v))


def get_inputs():
    return [torch.randn(M, K), torch.randn(K)]


def get_init_inputs():
    return []
