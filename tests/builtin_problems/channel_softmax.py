"""Softmax over the channels of an NCHW activation (a middle dim), then a scale."""
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return torch.softmax(x, dim=1) * 2.0


def get_inputs():
    return [torch.randn(3, 40, 5, 7)]


def get_init_inputs():
    return []
