"""nn.Conv2d(3, 8, 3) on a (2, 3, 12, 12) batch: a convolution for im2col kernels."""
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, cin: int, cout: int, k: int):
        super().__init__()
        self.conv = nn.Conv2d(cin, cout, k)

    def forward(self, x):
        return self.conv(x)


def get_inputs():
    return [torch.randn(2, 3, 12, 12)]


def get_init_inputs():
    return [3, 8, 3]
