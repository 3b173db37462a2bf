"""A softmax over rows at a temperature given to forward, and a power given to forward as an int
(a number the kernel may bake in: forward refuses another)."""
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor, temperature: float, power: int) -> torch.Tensor:
        return torch.softmax(x / temperature, dim=-1) ** power


batch_size = 16
width = 96


def get_inputs():
    return [torch.randn(batch_size, width), 0.7, 2]


def get_init_inputs():
    return []
