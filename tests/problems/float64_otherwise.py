"""A model that computes otherwise in float64 (a column mean over the batch, scaled by 1.01 when
its input is float64): its float64 evaluation on the host does not agree with eager, so it must
not be the yardstick."""
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        centered = x - x.mean(dim=0, keepdim=True)
        return 1.01 * centered if x.dtype == torch.float64 else centered


def get_inputs():
    return [torch.randn(128, 64)]


def get_init_inputs():
    return []
