"""Cheat (no own kernel): pure torch."""
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, scale):
        super().__init__()
        self.scale = scale

    def forward(self, x, y):
        return torch.relu(x + y) * self.scale
