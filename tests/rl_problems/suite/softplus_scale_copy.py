"""The other of the pair: the same computation with other names, comments and a larger size."""
import torch
import torch.nn as nn


class Model(nn.Module):
    """Scaled softplus minus the input."""

    def __init__(self):
        super().__init__()

    def forward(self, inp):
        # softplus first
        out = torch.nn.functional.softplus(inp)
        return out * 3.0 - inp


def get_inputs():
    return [torch.randn(2048)]


def get_init_inputs():
    return []
