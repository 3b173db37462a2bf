"""A loss with integer targets: cross-entropy of logits against class indices (mean, a 0-dim output).

SUITE_SCALE=small gives a CPU test size; the default size is meant for a GPU.
"""
import os

import torch
import torch.nn as nn
import torch.nn.functional as F

SMALL = os.environ.get("SUITE_SCALE") == "small"
ROWS, CLASSES = (16, 50) if SMALL else (8192, 32000)


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, logits, targets):
        return F.cross_entropy(logits, targets)


def get_inputs():
    return [torch.randn(ROWS, CLASSES), torch.randint(0, CLASSES, (ROWS,))]


def get_init_inputs():
    return []
