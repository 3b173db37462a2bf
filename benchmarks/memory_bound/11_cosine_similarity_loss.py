"""Cosine-similarity loss: mean over rows of 1 - cos(a_i, b_i) (a row reduction, then a mean).

Issue 18's measurement set (memory-bound half of the built-in policy), written in KernelBench's
style at KernelBench's published size; SUITE_SCALE=small gives a CPU test size.
"""
import os

import torch
import torch.nn as nn

SMALL = os.environ.get("SUITE_SCALE") == "small"

BATCH, DIM = (24, 100) if SMALL else (32768, 8192)


class Model(nn.Module):
    def forward(self, predictions, targets):
        return torch.mean(1 - torch.nn.functional.cosine_similarity(predictions, targets, dim=1))


def get_inputs():
    return [torch.randn(BATCH, DIM), torch.randn(BATCH, DIM)]


def get_init_inputs():
    return []
