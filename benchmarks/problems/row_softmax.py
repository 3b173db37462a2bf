"""Benchmark problem: softmax over rows of a 4096 x 2048 fp32 matrix."""
import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, x):
        return torch.softmax(x, dim=-1)


def get_inputs():
    return [torch.randn(4096, 2048)]


def get_init_inputs():
    return []
