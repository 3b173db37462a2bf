"""A sort (no family has a template for it) between elementwise work: the fallback family sorts in
torch and fuses the scale, bias, tanh and residual after it into one kernel, the clamp before it into another."""
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, width: int, scale: float):
        super().__init__()
        self.bias = nn.Parameter(torch.randn(width))
        self.scale = scale

    def forward(self, x):
        s = torch.sort(torch.clamp(x, -2.0, 2.0), dim=-1).values
        return torch.tanh(s * self.scale + self.bias) + x


batch_size = 6
width = 40


def get_inputs():
    return [torch.randn(batch_size, width)]


def get_init_inputs():
    return [width, 1.5]
