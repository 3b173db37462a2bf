"""A reverse cumulative sum (a sum over each element and all after it): flip, cumsum, flip back."""
import torch
import torch.nn as nn

batch_size, length = 5, 300


class Model(nn.Module):
    def __init__(self, dim: int):
        super().__init__()
        self.dim = dim

    def forward(self, x):
        return torch.cumsum(x.flip(self.dim), dim=self.dim).flip(self.dim)


def get_inputs():
    return [torch.randn(batch_size, length)]


def get_init_inputs():
    return [1]
