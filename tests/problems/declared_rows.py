"""relu(x) * 2 on a (batch_size, dim) input whose held-out sizes the problem declares itself:
exactly those are held out, no derived variant, smaller or larger."""
import torch
import torch.nn as nn

RATCHET_VARIANTS = [{"batch_size": 3}]
batch_size = 16
dim = 256


class Model(nn.Module):
    def forward(self, x):
        return torch.relu(x) * 2.0


def get_inputs():
    return [torch.randn(batch_size, dim)]


def get_init_inputs():
    return []
