"""GPU test problem: a 1024 x 1024 x 1024 fp32 matrix product (TF32 must stay off)."""
import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, a, b):
        return a @ b


def get_inputs():
    return [torch.randn(1024, 1024), torch.randn(1024, 1024)]


def get_init_inputs():
    return []
