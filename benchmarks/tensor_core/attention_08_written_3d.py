"""Written-out attention over [batch, seq, dim] (3-d, no heads), scale as a division by sqrt(d):
batch 64, seq 1024, dim 64, float32.

Tensor-core measurement set (attention), written for ratchet in KernelBench's style at
KernelBench-like published sizes; SUITE_SCALE=small gives a CPU test size.
"""
import math
import os

import torch
import torch.nn as nn

SMALL = os.environ.get("SUITE_SCALE") == "small"

BATCH, SEQ, DIM = (3, 37, 16) if SMALL else (64, 1024, 64)


class Model(nn.Module):
    def forward(self, q, k, v):
        scores = torch.bmm(q, k.transpose(1, 2)) / math.sqrt(q.size(-1))
        return torch.bmm(torch.softmax(scores, dim=-1), v)


def get_inputs():
    return [torch.randn(BATCH, SEQ, DIM) for _ in range(3)]


def get_init_inputs():
    return []
