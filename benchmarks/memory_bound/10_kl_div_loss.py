"""KL divergence of two row-wise distributions, reduction 'batchmean', from log-probabilities.

Issue 18's measurement set (memory-bound half of the built-in policy), written in KernelBench's
style at KernelBench's published size; SUITE_SCALE=small gives a CPU test size.
"""
import os

import torch
import torch.nn as nn

SMALL = os.environ.get("SUITE_SCALE") == "small"

BATCH, DIM = (16, 200) if SMALL else (16384, 16384)


class Model(nn.Module):
    def forward(self, predictions, targets):
        return torch.nn.functional.kl_div(torch.log(predictions), targets, reduction="batchmean")


def get_inputs():
    return [torch.rand(BATCH, DIM).softmax(dim=-1), torch.rand(BATCH, DIM).softmax(dim=-1)]


def get_init_inputs():
    return []
