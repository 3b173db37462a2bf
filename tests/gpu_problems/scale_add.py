"""GPU test problem: y = 2 * x + 1 over 64M fp32 elements (256 MB in, 256 MB out)."""
import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, x):
        return x * 2.0 + 1.0


def get_inputs():
    return [torch.randn(1 << 26)]


def get_init_inputs():
    return []
