"""A 2-d batch norm in training mode (statistics over the batch), 16 x 64 x 8 x 8: no row stands
alone, and its sizes are module constants, so the held-out trial varies them."""
import torch
import torch.nn as nn

BATCH, CHANNELS, SIDE = 16, 64, 8


class Model(nn.Module):
    def __init__(self, channels: int):
        super().__init__()
        self.bn = nn.BatchNorm2d(channels)

    def forward(self, x):
        return self.bn(x)


def get_inputs():
    return [torch.randn(BATCH, CHANNELS, SIDE, SIDE)]


def get_init_inputs():
    return [CHANNELS]
