"""A single op: a small matrix product (32 x 64) @ (64 x 32)."""
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, a, b):
        return torch.matmul(a, b)


def get_inputs():
    return [torch.randn(32, 64), torch.randn(64, 32)]


def get_init_inputs():
    return []
