"""Half degenerate: clamp to [0, 1] of inputs already in [0, 1) is the identity; the evaluator's
shifted inputs (wider, still non-negative) do reach past 1, so half the trials still test it."""
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return torch.clamp(x, 0.0, 1.0)


def get_inputs():
    return [torch.rand(128)]


def get_init_inputs():
    return []
