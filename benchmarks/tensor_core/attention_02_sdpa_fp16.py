"""Scaled dot-product attention, float16: batch 32, heads 32, seq 512, head dim 64.

Tensor-core measurement set (attention), written for ratchet in KernelBench's style at
KernelBench-like published sizes; SUITE_SCALE=small gives a CPU test size.
"""
import os

import torch
import torch.nn as nn
import torch.nn.functional as F

SMALL = os.environ.get("SUITE_SCALE") == "small"

BATCH, HEADS, SEQ, DIM = (2, 3, 40, 16) if SMALL else (32, 32, 512, 64)
DTYPE = torch.float16


class Model(nn.Module):
    def forward(self, q, k, v):
        return F.scaled_dot_product_attention(q, k, v)


def get_inputs():
    return [torch.randn(BATCH, HEADS, SEQ, DIM, dtype=DTYPE) for _ in range(3)]


def get_init_inputs():
    return []
