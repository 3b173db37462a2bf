"""Integer inputs: cross-entropy of 16 rows of 32 logits against class indices (a 0-dim output)."""
import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, logits, targets):
        return F.cross_entropy(logits, targets)


def get_inputs():
    return [torch.randn(16, 32), torch.randint(0, 32, (16,))]


def get_init_inputs():
    return []
