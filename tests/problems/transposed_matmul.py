"""A product of a transposed operand, a.T @ b, (512 x 64).T @ (512 x 32) on non-negative inputs:
no input leads with the output's 64 rows, which are the first operand's columns, so rows of it
are evaluated with that operand cut along its second dimension."""
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, a, b):
        return torch.matmul(a.t(), b)


def get_inputs():
    return [torch.rand(512, 64), torch.rand(512, 32)]


def get_init_inputs():
    return []
