"""GPU test problem: relu(x @ W^T + b), x 512 x 4096, W 2048 x 4096, in fp32."""
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, k: int, n: int):
        super().__init__()
        self.linear = nn.Linear(k, n)

    def forward(self, x):
        return torch.relu(self.linear(x))


def get_inputs():
    return [torch.randn(512, 4096)]


def get_init_inputs():
    return [4096, 2048]
