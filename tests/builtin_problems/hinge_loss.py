"""Hinge loss: mean(clamp(1 - predictions * targets, min=0)), targets of shape (batch,) broadcast."""
import torch
import torch.nn as nn

batch_size = 32


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, predictions, targets):
        return torch.mean(torch.clamp(1 - predictions * targets, min=0))


def get_inputs():
    return [torch.randn(batch_size, batch_size), torch.randint(0, 2, (batch_size,)).float() * 2 - 1]


def get_init_inputs():
    return []
