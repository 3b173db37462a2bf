"""Half precision, a per-channel bias broadcast over [N, C, H, W], then tanh and a clamp."""
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, channels: int):
        super().__init__()
        self.bias = nn.Parameter(torch.randn(channels, 1, 1, dtype=torch.float16))

    def forward(self, x):
        return torch.clamp(torch.tanh(x + self.bias), min=-0.5)


def get_inputs():
    return [torch.randn(2, 4, 8, 8, dtype=torch.float16)]


def get_init_inputs():
    return [4]
