"""minGPT's causal self-attention as written (level-3 style): the mask is a registered tril buffer
sliced to the sequence, the output's heads merged back: batch 128, seq 512, n_embd 768, 8 heads.

Tensor-core measurement set (attention), written for ratchet in KernelBench's style at
KernelBench-like published sizes; SUITE_SCALE=small gives a CPU test size.
"""
import math
import os

import torch
import torch.nn as nn

SMALL = os.environ.get("SUITE_SCALE") == "small"

BATCH, SEQ, EMBD, HEADS = (2, 40, 48, 3) if SMALL else (128, 512, 768, 8)


class Model(nn.Module):
    def __init__(self, n_embd: int, n_head: int, max_seqlen: int):
        super().__init__()
        self.n_head = n_head
        self.register_buffer("bias", torch.tril(torch.ones(max_seqlen, max_seqlen)).view(1, 1, max_seqlen, max_seqlen))

    def forward(self, q, k, v):
        b, t, c = q.size()
        q = q.view(b, t, self.n_head, c // self.n_head).transpose(1, 2)
        k = k.view(b, t, self.n_head, c // self.n_head).transpose(1, 2)
        v = v.view(b, t, self.n_head, c // self.n_head).transpose(1, 2)
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
        att = att.masked_fill(self.bias[:, :, :t, :t] == 0, float("-inf"))
        att = torch.softmax(att, dim=-1)
        y = att @ v
        return y.transpose(1, 2).contiguous().view(b, t, c)


def get_inputs():
    return [torch.randn(BATCH, SEQ, EMBD) for _ in range(3)]


def get_init_inputs():
    return [EMBD, HEADS, SEQ]
