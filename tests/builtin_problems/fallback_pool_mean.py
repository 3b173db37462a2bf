"""A 2D convolution, a max pooling, then the mean over height and width together (the shape of
KernelBench L2 23's mean after its norm): convolution and pooling in torch, the mean a reduction
kernel of the draft's own over two adjacent dims at once."""
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, in_channels: int, out_channels: int, kernel_size: int):
        super().__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, kernel_size)
        self.pool = nn.MaxPool2d(2)

    def forward(self, x):
        return self.pool(self.conv(x)).mean(dim=[2, 3])


batch_size = 3
in_channels = 2
out_channels = 8
height = 11
width = 10


def get_inputs():
    return [torch.randn(batch_size, in_channels, height, width)]


def get_init_inputs():
    return [in_channels, out_channels, 3]
