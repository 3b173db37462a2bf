"""A 3D convolution, the minimum over depth, then a softmax over channels (KernelBench L2 24's
shape of work): the convolution in torch; the minimum and the softmax are reductions, each a
kernel of the draft's own (the fallback kept this eager before it had reductions)."""
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, in_channels: int, out_channels: int, kernel_size: int):
        super().__init__()
        self.conv = nn.Conv3d(in_channels, out_channels, kernel_size)

    def forward(self, x):
        return torch.softmax(torch.min(self.conv(x), dim=2)[0], dim=1)


batch_size = 2
in_channels = 3
out_channels = 8
depth = 8
height = 9
width = 8


def get_inputs():
    return [torch.randn(batch_size, in_channels, depth, height, width)]


def get_init_inputs():
    return [in_channels, out_channels, 3]
