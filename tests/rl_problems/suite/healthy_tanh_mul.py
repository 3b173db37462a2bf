"""Healthy: tanh(x) * y on normal inputs."""
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x, y):
        return torch.tanh(x) * y


def get_inputs():
    return [torch.randn(256), torch.randn(256)]


def get_init_inputs():
    return []
