"""Mean squared error between predictions and targets: a mean over every element.

Issue 18's measurement set (memory-bound half of the built-in policy), written in KernelBench's
style at KernelBench's published size; SUITE_SCALE=small gives a CPU test size.
"""
import os

import torch
import torch.nn as nn

SMALL = os.environ.get("SUITE_SCALE") == "small"

BATCH, DIM = (16, 300) if SMALL else (32768, 32768)


class Model(nn.Module):
    def forward(self, predictions, targets):
        return torch.mean((predictions - targets) ** 2)


def get_inputs():
    return [torch.rand(BATCH, DIM) * torch.rand(()), torch.rand(BATCH, DIM)]


def get_init_inputs():
    return []
