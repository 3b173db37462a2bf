"""Attention, written out: softmax(q @ k^T / sqrt(d)) @ v over (batch, heads, sequence, head_dim).

SUITE_SCALE=small gives a CPU test size; the default size is meant for a GPU.
"""
import math
import os

import torch
import torch.nn as nn

SMALL = os.environ.get("SUITE_SCALE") == "small"
BATCH, HEADS, SEQ, DIM = (1, 2, 32, 16) if SMALL else (8, 16, 1024, 64)


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, q, k, v):
        scores = torch.matmul(q, k.transpose(-2, -1)) / math.sqrt(q.shape[-1])
        return torch.matmul(torch.softmax(scores, dim=-1), v)


def get_inputs():
    shape = (BATCH, HEADS, SEQ, DIM)
    return [torch.randn(*shape), torch.randn(*shape), torch.randn(*shape)]


def get_init_inputs():
    return []
