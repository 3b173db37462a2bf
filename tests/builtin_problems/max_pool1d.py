"""Max pooling over a sequence with dilation: nn.MaxPool1d(4, stride 1, padding 2, dilation 3)."""
import torch
import torch.nn as nn

batch_size, features, length = 5, 6, 40
kernel_size, stride, padding, dilation = 4, 1, 2, 3


class Model(nn.Module):
    def __init__(self, kernel_size: int, stride: int, padding: int, dilation: int):
        super().__init__()
        self.maxpool = nn.MaxPool1d(kernel_size=kernel_size, stride=stride, padding=padding, dilation=dilation)

    def forward(self, x):
        return self.maxpool(x)


def get_inputs():
    return [torch.randn(batch_size, features, length)]


def get_init_inputs():
    return [kernel_size, stride, padding, dilation]
