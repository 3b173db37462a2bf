"""Softmax over a few long rows (2 rows of 32768): split across programs, online softmax partials."""
import torch
import torch.nn as nn

batch_size = 2
dim = 32768


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return torch.softmax(x, dim=1)


def get_inputs():
    return [torch.randn(batch_size, dim) * 4.0]


def get_init_inputs():
    return []
