"""A matrix product kept upper triangular (KernelBench L1 14's shape of work): the fallback family
calls the product in torch and writes the triangle in a kernel of its own, by position."""
import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, a, b):
        return torch.triu(torch.matmul(a, b), diagonal=1)


rows = 24
inner = 16
cols = 20


def get_inputs():
    return [torch.randn(rows, inner), torch.randn(inner, cols)]


def get_init_inputs():
    return []
