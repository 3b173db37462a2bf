"""A forward written for the device only, in the way the host evaluation meets it: a column mean
over the batch that raises a ValueError on a whole batch in float64 (as device-only code raises on
host tensors). The problem must still open, judged without the host evaluation."""
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        if x.dtype == torch.float64 and x.shape[0] == 128:
            raise ValueError("this forward runs on the device only")
        return x - x.mean(dim=0, keepdim=True)


def get_inputs():
    return [torch.randn(128, 64)]


def get_init_inputs():
    return []
