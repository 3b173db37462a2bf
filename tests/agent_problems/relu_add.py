"""A small elementwise problem for the agent's end-to-end tests: relu(x + y) on 4096 floats."""
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x, y):
        return torch.relu(x + y)


def get_inputs():
    return [torch.randn(4096), torch.randn(4096)]


def get_init_inputs():
    return []
