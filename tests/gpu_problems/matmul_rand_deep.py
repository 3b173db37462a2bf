"""GPU test problem: (1024 x 4096) @ (4096 x 1024) in fp32 on non-negative inputs (torch.rand, as
many KernelBench products are made): a deep reduction where TF32 is within the float32 tolerance."""
import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, a, b):
        return a @ b


def get_inputs():
    return [torch.rand(1024, 4096), torch.rand(4096, 1024)]


def get_init_inputs():
    return []
