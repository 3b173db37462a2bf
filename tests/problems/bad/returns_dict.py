"""Malformed: forward() returns a dict, which no candidate could be compared on."""
import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, x):
        return {"doubled": x * 2}


def get_inputs():
    return [torch.randn(64)]


def get_init_inputs():
    return []
