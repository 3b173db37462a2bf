"""A matrix times a number given to forward (as KernelBench's L1 5 gives one), plus one."""
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, A: torch.Tensor, s: float) -> torch.Tensor:
        return A * s + 1.0


M = 48
N = 80


def get_inputs():
    return [torch.rand(M, N), 3.14]


def get_init_inputs():
    return []
