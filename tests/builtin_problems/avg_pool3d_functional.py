"""3-d average pooling written with torch.nn.functional and a divisor_override."""
import torch
import torch.nn as nn
import torch.nn.functional as F

batch_size, channels, depth, height, width = 2, 2, 6, 7, 9


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return F.avg_pool3d(x, kernel_size=3, stride=2, padding=1, divisor_override=5)


def get_inputs():
    return [torch.randn(batch_size, channels, depth, height, width)]


def get_init_inputs():
    return []
