"""argmax over a middle dim: torch.argmax(x, dim=1) of [batch, dim1, dim2], int64 indices."""
import torch
import torch.nn as nn

batch_size, dim1, dim2 = 2, 33, 10


class Model(nn.Module):
    def __init__(self, dim: int):
        super().__init__()
        self.dim = dim

    def forward(self, x):
        return torch.argmax(x, dim=self.dim)


def get_inputs():
    return [torch.randn(batch_size, dim1, dim2)]


def get_init_inputs():
    return [1]
