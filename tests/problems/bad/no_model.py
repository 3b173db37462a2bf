"""Malformed: no Model class (the module is called Net)."""
import torch
import torch.nn as nn


class Net(nn.Module):
    def forward(self, x):
        return x * 2


def get_inputs():
    return [torch.randn(64)]


def get_init_inputs():
    return []
