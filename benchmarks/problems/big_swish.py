"""Benchmark problem with multi-GB inputs: Swish over 2^30 fp32 elements (4 GiB in, 4 GiB out).
RATCHET_BENCH_BIG_ELEMS scales it (the CPU smoke run uses a small size)."""
import os

import torch
import torch.nn as nn

N = int(os.environ.get("RATCHET_BENCH_BIG_ELEMS", 1 << 30))


class Model(nn.Module):
    def forward(self, x):
        return x * torch.sigmoid(x)


def get_inputs():
    return [torch.randn(N)]


def get_init_inputs():
    return []
