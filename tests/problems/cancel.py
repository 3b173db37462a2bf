"""x*x - (x-1)*(x+1), which is 1: eager float32 loses it to cancellation once x is large (the
stress inputs), float64 keeps it. 8192 elements."""
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return x * x - (x - 1) * (x + 1)


def get_inputs():
    return [torch.randn(8192)]


def get_init_inputs():
    return []
