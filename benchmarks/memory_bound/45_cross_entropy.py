"""Cross-entropy of logits against class indices, mean over the rows (KernelBench L1's
CrossEntropyLoss): 16384 rows of 4096 classes.

Memory-bound measurement set, written for ratchet in KernelBench's style at KernelBench-like
published sizes; SUITE_SCALE=small gives a CPU test size.
"""
import os

import torch
import torch.nn as nn
import torch.nn.functional as F

SMALL = os.environ.get("SUITE_SCALE") == "small"

ROWS, CLASSES = (64, 100) if SMALL else (16384, 4096)


class Model(nn.Module):
    def forward(self, predictions, targets):
        return F.cross_entropy(predictions, targets)


def get_inputs():
    return [torch.randn(ROWS, CLASSES), torch.randint(0, CLASSES, (ROWS,))]


def get_init_inputs():
    return []
