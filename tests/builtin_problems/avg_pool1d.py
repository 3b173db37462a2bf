"""Average pooling over a sequence, padding counted: nn.AvgPool1d(4, stride 1, padding 2)."""
import torch
import torch.nn as nn

batch_size, in_channels, input_length = 5, 3, 37
kernel_size, stride, padding = 4, 1, 2


class Model(nn.Module):
    def __init__(self, kernel_size: int, stride: int, padding: int):
        super().__init__()
        self.avg_pool = nn.AvgPool1d(kernel_size=kernel_size, stride=stride, padding=padding)

    def forward(self, x):
        return self.avg_pool(x)


def get_inputs():
    return [torch.randn(batch_size, in_channels, input_length)]


def get_init_inputs():
    return [kernel_size, stride, padding]
