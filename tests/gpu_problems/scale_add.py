"""GPU test problem: y = 2 * x + 1 over 8M fp32 elements."""
import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, x):
        return x * 2.0 + 1.0


def get_inputs():
    return [torch.randn(1 << 23)]


def get_init_inputs():
    return []
