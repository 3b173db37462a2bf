"""A linear map without bias, halved, summed over the features, scaled.

Issue 18's measurement set (memory-bound half of the built-in policy), written in KernelBench's
style at KernelBench's published size; SUITE_SCALE=small gives a CPU test size.
"""
import os

import torch
import torch.nn as nn

SMALL = os.environ.get("SUITE_SCALE") == "small"

BATCH, IN_FEATURES, OUT_FEATURES = (16, 64, 48) if SMALL else (1024, 8192, 8192)


class Model(nn.Module):
    def __init__(self, in_features: int, out_features: int, scale: float):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(out_features, in_features))
        self.scale = scale

    def forward(self, x):
        y = torch.matmul(x, self.weight.T) / 2
        return torch.sum(y, dim=1, keepdim=True) * self.scale


def get_inputs():
    return [torch.rand(BATCH, IN_FEATURES)]


def get_init_inputs():
    return [IN_FEATURES, OUT_FEATURES, 1.5]
