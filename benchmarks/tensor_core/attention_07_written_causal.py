"""The written-out causal self-attention core of a minGPT block (level-3 style), q, k, v given:
batch 128, 8 heads, seq 512, head dim 96 (n_embd 768), float32.

Tensor-core measurement set (attention), written for ratchet in KernelBench's style at
KernelBench-like published sizes; SUITE_SCALE=small gives a CPU test size.
"""
import math
import os

import torch
import torch.nn as nn

SMALL = os.environ.get("SUITE_SCALE") == "small"

BATCH, HEADS, SEQ, DIM = (2, 3, 40, 24) if SMALL else (128, 8, 512, 96)


class Model(nn.Module):
    def forward(self, q, k, v):
        t = q.size(-2)
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
        mask = torch.tril(torch.ones(t, t, device=q.device)).view(1, 1, t, t)
        att = att.masked_fill(mask == 0, float("-inf"))
        att = torch.softmax(att, dim=-1)
        return att @ v


def get_inputs():
    return [torch.randn(BATCH, HEADS, SEQ, DIM) for _ in range(3)]


def get_init_inputs():
    return []
