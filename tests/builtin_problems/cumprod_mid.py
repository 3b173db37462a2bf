"""A cumulative product along a middle dim: torch.cumprod(x, dim=1) of [batch, steps, features]."""
import torch
import torch.nn as nn

batch_size, steps, features = 3, 37, 20


class Model(nn.Module):
    def __init__(self, dim: int):
        super().__init__()
        self.dim = dim

    def forward(self, x):
        return torch.cumprod(x, dim=self.dim)


def get_inputs():
    return [torch.rand(batch_size, steps, features) * 0.5 + 0.75]


def get_init_inputs():
    return [1]
