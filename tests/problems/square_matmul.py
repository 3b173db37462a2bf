"""A square product (128 x 128) @ (128 x 128) on non-negative inputs: both operands lead with the
batch's size, so rows of it are evaluated with the first operand cut and the second whole."""
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, a, b):
        return torch.matmul(a, b)


def get_inputs():
    return [torch.rand(128, 128), torch.rand(128, 128)]


def get_init_inputs():
    return []
