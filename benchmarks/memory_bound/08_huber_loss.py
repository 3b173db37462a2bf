"""Smooth-L1 (Huber) loss with PyTorch's default beta of 1: a mean over every element.

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
        return torch.nn.functional.smooth_l1_loss(predictions, targets)


def get_inputs():
    return [torch.randn(BATCH, DIM) * 2, torch.randn(BATCH, DIM)]


def get_init_inputs():
    return []
