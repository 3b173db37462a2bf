"""GPU test problem: relu(x + y) * scale over 8M fp32 elements (eager: two kernels, about 0.1 ms)."""
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, scale: float):
        super().__init__()
        self.scale = scale

    def forward(self, x, y):
        return torch.relu(x + y) * self.scale


def get_inputs():
    return [torch.randn(1 << 23), torch.randn(1 << 23)]


def get_init_inputs():
    return [1.5]
