"""ReLU of inputs the problem draws in [0, 1): its own inputs never test the negative half."""
import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, x):
        return torch.relu(x)


def get_inputs():
    return [torch.rand(4096)]


def get_init_inputs():
    return []
