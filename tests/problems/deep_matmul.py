"""A single op, a deep reduction: (16 x 512) @ (512 x 16) on non-negative inputs (as many
KernelBench products are made), where a lower-precision product is within the float32 tolerance."""
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, a, b):
        return torch.matmul(a, b)


def get_inputs():
    return [torch.rand(16, 512), torch.rand(512, 16)]


def get_init_inputs():
    return []
