"""Benchmark problem: (2048 x 4096) @ (4096 x 2048) in fp32 on non-negative inputs: the float64
reference's cost (issue 35) on a compute-bound product."""
import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, a, b):
        return a @ b


def get_inputs():
    return [torch.rand(2048, 4096), torch.rand(4096, 2048)]


def get_init_inputs():
    return []
