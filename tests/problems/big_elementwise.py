"""A multi-GB input: relu(x) * 2 on 2^30 float32 elements (4 GiB in, 4 GiB out). GPU only."""
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return torch.relu(x) * 2.0


def get_inputs():
    return [torch.randn(1 << 30)]


def get_init_inputs():
    return []
