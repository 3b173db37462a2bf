"""relu(x) * 2 on a (dim, dim, dim) input: one size, cubed, so any larger dim multiplies the
memory by more than a larger held-out variant may take (1.25 ** 3 > 2)."""
import torch
import torch.nn as nn

dim = 16


class Model(nn.Module):
    def forward(self, x):
        return torch.relu(x) * 2.0


def get_inputs():
    return [torch.randn(dim, dim, dim)]


def get_init_inputs():
    return []
