"""A 3x3 convolution with padding, GroupNorm over 4 groups, a learned per-channel scale."""
import torch
import torch.nn as nn

batch_size, channels, height, width = 2, 3, 9, 8


class Model(nn.Module):
    def __init__(self, in_channels: int, out_channels: int, groups: int):
        super().__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, 3, padding=1)
        self.norm = nn.GroupNorm(groups, out_channels)
        self.scale = nn.Parameter(torch.randn(out_channels, 1, 1))

    def forward(self, x):
        return self.norm(self.conv(x)) * self.scale


def get_inputs():
    return [torch.randn(batch_size, channels, height, width)]


def get_init_inputs():
    return [channels, 8, 4]
