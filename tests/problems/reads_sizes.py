"""A forward that reads the module's sizes (as some KernelBench problems do): held-out sizes
apply to it too, or the reference would refuse every variant."""
import torch
import torch.nn as nn

batch_size = 16
dim = 256


class Model(nn.Module):
    def forward(self, x):
        return torch.relu(x.reshape(batch_size, dim)) * 2.0


def get_inputs():
    return [torch.randn(batch_size * dim)]


def get_init_inputs():
    return []
