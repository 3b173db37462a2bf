"""Softmax over rows wider than one tile of the looped variant (1500 columns)."""
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return torch.softmax(x, dim=-1)


def get_inputs():
    return [torch.randn(3, 1500)]


def get_init_inputs():
    return []
