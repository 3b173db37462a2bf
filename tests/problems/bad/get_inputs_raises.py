"""Malformed: get_inputs() raises."""
import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, x):
        return x * 2


def get_inputs():
    return [torch.randn(64, 64) @ torch.randn(32, 32)]


def get_init_inputs():
    return []
