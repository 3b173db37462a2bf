"""relu(x) * 2 on 4096 floats: exact in any binary floating type, so eager's own error against
float64 is zero, and the float64-judged bound leaves a candidate only its floor."""
import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, x):
        return torch.relu(x) * 2.0


def get_inputs():
    return [torch.randn(4096)]


def get_init_inputs():
    return []
