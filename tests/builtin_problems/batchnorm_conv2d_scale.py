"""A 3x3 convolution, x * tanh(softplus(x)), BatchNorm2d in training mode (statistics per channel
over the batch and both spatial dims), a scale by a module scalar."""
import torch
import torch.nn as nn

batch_size, channels, height, width = 3, 3, 9, 8


class Model(nn.Module):
    def __init__(self, in_channels: int, out_channels: int, scaling_factor: float):
        super().__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, 3)
        self.bn = nn.BatchNorm2d(out_channels)
        self.scaling_factor = scaling_factor

    def forward(self, x):
        x = self.conv(x)
        x = torch.tanh(torch.nn.functional.softplus(x)) * x
        return self.bn(x) * self.scaling_factor


def get_inputs():
    return [torch.randn(batch_size, channels, height, width)]


def get_init_inputs():
    return [channels, 6, 2.0]
