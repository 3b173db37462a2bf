"""Elementwise, several ops, a scalar init argument: relu(x + y) * scale on 4096 floats."""
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, scale: float):
        super().__init__()
        self.scale = scale

    def forward(self, x, y):
        return torch.relu(x + y) * self.scale


def get_inputs():
    return [torch.randn(4096), torch.randn(4096)]


def get_init_inputs():
    return [1.5]
