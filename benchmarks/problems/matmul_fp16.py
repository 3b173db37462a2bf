"""Benchmark problem: a 2048 x 2048 x 2048 fp16 matrix product."""
import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, a, b):
        return torch.matmul(a, b)


def get_inputs():
    return [torch.randn(2048, 2048, dtype=torch.float16), torch.randn(2048, 2048, dtype=torch.float16)]


def get_init_inputs():
    return []
