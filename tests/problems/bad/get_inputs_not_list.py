"""Malformed: get_inputs() returns a dict, not a list."""
import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, x):
        return x * 2


def get_inputs():
    return {"x": torch.randn(64)}


def get_init_inputs():
    return []
