"""Layer norm over long trailing rows (2 rows of 32768): split across programs."""
import torch
import torch.nn as nn

batch_size = 2
shape = (8, 64, 64)


class Model(nn.Module):
    def __init__(self, shape):
        super().__init__()
        self.norm = nn.LayerNorm(shape)

    def forward(self, x):
        return self.norm(x)


def get_inputs():
    return [torch.randn(batch_size, *shape) * 2.0 + 3.0]


def get_init_inputs():
    return [shape]
