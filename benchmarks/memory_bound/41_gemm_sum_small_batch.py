"""nn.Linear(8192, 8192) on a batch of 16, divided by 2, summed over the features, scaled (a 256 MiB weight)."""
import os

import torch
import torch.nn as nn
import torch.nn.functional as F

SMALL = os.environ.get("SUITE_SCALE") == "small"  # a CPU test size
batch_size = 4 if SMALL else 16
in_features = 64 if SMALL else 8192
out_features = 48 if SMALL else 8192


class Model(nn.Module):
    def __init__(self, in_features, out_features, scale):
        super().__init__()
        self.fc = nn.Linear(in_features, out_features)
        self.scale = scale

    def forward(self, x):
        x = self.fc(x) / 2
        x = torch.sum(x, dim=1, keepdim=True)
        return x * self.scale


def get_inputs():
    return [torch.randn(batch_size, in_features)]


def get_init_inputs():
    return [in_features, out_features, 1.5]
