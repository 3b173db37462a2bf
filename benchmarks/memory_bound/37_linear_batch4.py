"""nn.Linear(16384, 16384) (a 1 GiB weight) on a batch of 4, then ReLU: four vectors streamed together."""
import os

import torch
import torch.nn as nn
import torch.nn.functional as F

SMALL = os.environ.get("SUITE_SCALE") == "small"  # a CPU test size
batch_size = 4 if SMALL else 4
in_features = 300 if SMALL else 16384
out_features = 200 if SMALL else 16384


class Model(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.fc = nn.Linear(in_features, out_features)

    def forward(self, x):
        return torch.relu(self.fc(x))


def get_inputs():
    return [torch.randn(batch_size, in_features)]


def get_init_inputs():
    return [in_features, out_features]
