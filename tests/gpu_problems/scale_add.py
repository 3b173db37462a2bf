"""GPU test problem: y = 2 * x + 1 over 256M fp32 elements (1 GiB in, 1 GiB out: a kernel of about 0.5 ms, longer than the timer's 0.2 ms pre-roll)."""
import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, x):
        return x * 2.0 + 1.0


def get_inputs():
    return [torch.randn(1 << 28)]


def get_init_inputs():
    return []
