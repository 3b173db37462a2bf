"""Malformed: Model's constructor raises."""
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, width):
        super().__init__()
        raise ValueError(f"unsupported width {width}")

    def forward(self, x):
        return x * 2


def get_inputs():
    return [torch.randn(64)]


def get_init_inputs():
    return [7]
