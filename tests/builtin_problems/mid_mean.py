"""A reduction over a middle dim: mean over dim 1 of [4, 32, 48], then ReLU."""
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, dim: int):
        super().__init__()
        self.dim = dim

    def forward(self, x):
        return torch.relu(torch.mean(x, dim=self.dim))


def get_inputs():
    return [torch.randn(4, 32, 48)]


def get_init_inputs():
    return [1]
