"""Long-sequence causal attention, float16: batch 2, heads 16, seq 4096, head dim 128.

Tensor-core measurement set (attention), written for ratchet in KernelBench's style at
KernelBench-like published sizes; SUITE_SCALE=small gives a CPU test size.
"""
import os

import torch
import torch.nn as nn
import torch.nn.functional as F

SMALL = os.environ.get("SUITE_SCALE") == "small"

BATCH, HEADS, SEQ, DIM = (1, 2, 70, 32) if SMALL else (2, 16, 4096, 128)
DTYPE = torch.float16


class Model(nn.Module):
    def forward(self, q, k, v):
        return F.scaled_dot_product_attention(q, k, v, is_causal=True)


def get_inputs():
    return [torch.randn(BATCH, HEADS, SEQ, DIM, dtype=DTYPE) for _ in range(3)]


def get_init_inputs():
    return []
