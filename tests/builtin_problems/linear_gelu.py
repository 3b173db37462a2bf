"""nn.Linear on a 3-d activation, then GELU and a scale: the epilogue fuses bias, GELU and scale."""
import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self, in_features: int, out_features: int, scale: float):
        super().__init__()
        self.fc = nn.Linear(in_features, out_features)
        self.scale = scale

    def forward(self, x):
        return F.gelu(self.fc(x)) * self.scale


def get_inputs():
    return [torch.randn(2, 5, 48)]


def get_init_inputs():
    return [48, 40, 2.0]
