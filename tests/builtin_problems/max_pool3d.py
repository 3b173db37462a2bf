"""3-d max pooling with ceil_mode: nn.MaxPool3d(5, stride 2, padding 1, ceil_mode=True)."""
import torch
import torch.nn as nn

batch_size, channels, depth, height, width = 2, 3, 5, 6, 7
kernel_size, stride, padding = 5, 2, 1


class Model(nn.Module):
    def __init__(self, kernel_size: int, stride: int, padding: int):
        super().__init__()
        self.pool = nn.MaxPool3d(kernel_size, stride=stride, padding=padding, ceil_mode=True)

    def forward(self, x):
        return self.pool(x)


def get_inputs():
    return [torch.randn(batch_size, channels, depth, height, width)]


def get_init_inputs():
    return [kernel_size, stride, padding]
