"""A grouped 3-d convolution (stride in height, padding 1), then ReLU."""
import torch
import torch.nn as nn

batch_size, depth, height, width = 2, 4, 5, 6


class Model(nn.Module):
    def __init__(self, kernel_size: int):
        super().__init__()
        self.conv = nn.Conv3d(4, 6, kernel_size, stride=(1, 2, 1), padding=1, groups=2)

    def forward(self, x):
        return torch.relu(self.conv(x))


def get_inputs():
    return [torch.randn(batch_size, 4, depth, height, width)]


def get_init_inputs():
    return [3]
