"""A convolution, elementwise work, a max pooling, then more (a pooling after a convolution: no
family's kernel does both): convolution and pooling in torch, each elementwise stretch one kernel."""
import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self, in_channels: int, out_channels: int, kernel_size: int, shift: float):
        super().__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, kernel_size)
        self.pool = nn.MaxPool2d(2)
        self.shift = shift

    def forward(self, x):
        y = torch.tanh(self.conv(x) - self.shift)
        return F.mish(self.pool(y)) * 0.5


batch_size = 2
in_channels = 3
out_channels = 5
height = 10
width = 12


def get_inputs():
    return [torch.randn(batch_size, in_channels, height, width)]


def get_init_inputs():
    return [in_channels, out_channels, 3, 0.25]
