"""A target for the sandbox's attack tests: relu(x) * 2 + 1. The constructor's two strings tell
the attacking candidate what to try (tests/candidates/native_attacks.py); the reference ignores them."""
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, what: str, arg: str):
        super().__init__()

    def forward(self, x):
        return torch.relu(x) * 2 + 1


def get_inputs():
    return [torch.randn(4096)]


def get_init_inputs():
    return ["none", ""]
