"""Batch norm in inference mode (running statistics): an affine map per channel.

Issue 18's measurement set (memory-bound half of the built-in policy), written in KernelBench's
style at KernelBench's published size; SUITE_SCALE=small gives a CPU test size.
"""
import os

import torch
import torch.nn as nn

SMALL = os.environ.get("SUITE_SCALE") == "small"

BATCH, FEATURES, DIM1, DIM2 = (2, 4, 16, 18) if SMALL else (64, 64, 512, 512)


class Model(nn.Module):
    def __init__(self, num_features: int):
        super().__init__()
        self.norm = nn.BatchNorm2d(num_features=num_features)
        with torch.no_grad():  # running statistics a trained model would have
            self.norm.running_mean.uniform_(-0.5, 0.5)
            self.norm.running_var.uniform_(0.5, 2.0)
        self.norm.eval()

    def forward(self, x):
        return self.norm(x)


def get_inputs():
    return [torch.randn(BATCH, FEATURES, DIM1, DIM2)]


def get_init_inputs():
    return [FEATURES]
