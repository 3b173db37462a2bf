"""L1 normalization of each row: x / sum(|x|) over dim 1.

Issue 18's measurement set (memory-bound half of the built-in policy), written in KernelBench's
style at KernelBench's published size; SUITE_SCALE=small gives a CPU test size.
"""
import os

import torch
import torch.nn as nn

SMALL = os.environ.get("SUITE_SCALE") == "small"

BATCH, DIM = (16, 1000) if SMALL else (32768, 65535)


class Model(nn.Module):
    def forward(self, x):
        return x / torch.sum(torch.abs(x), dim=1, keepdim=True)


def get_inputs():
    return [torch.randn(BATCH, DIM)]


def get_init_inputs():
    return []
