"""Degenerate: the output depends only on the weights, never on the input."""
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, n):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(n))

    def forward(self, x):
        return self.weight * 2.0 + x.sum() * 0.0


def get_inputs():
    return [torch.randn(64)]


def get_init_inputs():
    return [64]
