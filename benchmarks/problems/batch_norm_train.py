"""Benchmark problem whose rows do not stand alone: a 2-d batch norm in training mode (statistics
over the batch) on 64 x 64 x 512 x 512 fp32 (4 GiB in, 4 GiB out), the size of KernelBench's L1 33.
Over float64_max_mb its float64 judging is on elements of sets evaluated on the host
(tools/judge/exact_host.py). RATCHET_BENCH_BN_BATCH scales the batch (a CPU smoke run: 1, with
RATCHET_BENCH_BN_SIDE 16)."""
import os

import torch
import torch.nn as nn

BATCH = int(os.environ.get("RATCHET_BENCH_BN_BATCH", 64))
SIDE = int(os.environ.get("RATCHET_BENCH_BN_SIDE", 512))
CHANNELS = 64


class Model(nn.Module):
    def __init__(self, channels: int):
        super().__init__()
        self.bn = nn.BatchNorm2d(channels)

    def forward(self, x):
        return self.bn(x)


def get_inputs():
    return [torch.randn(BATCH, CHANNELS, SIDE, SIDE)]


def get_init_inputs():
    return [CHANNELS]
