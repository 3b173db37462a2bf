"""Hinge loss: mean(clamp(1 - predictions * targets, min=0)), labels of +-1 broadcast over the last dim.

Issue 18's measurement set (memory-bound half of the built-in policy), written in KernelBench's
style at KernelBench's published size; SUITE_SCALE=small gives a CPU test size.
"""
import os

import torch
import torch.nn as nn

SMALL = os.environ.get("SUITE_SCALE") == "small"

BATCH, DIM = (20, 20) if SMALL else (32768, 32768)


class Model(nn.Module):
    def forward(self, predictions, targets):
        return torch.mean(torch.clamp(1 - predictions * targets, min=0))


def get_inputs():
    return [torch.randn(BATCH, DIM), torch.randint(0, 2, (DIM,)).float() * 2 - 1]


def get_init_inputs():
    return []
