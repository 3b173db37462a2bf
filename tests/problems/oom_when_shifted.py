"""Test problem: 2 * x, whose forward runs out of device memory on off-centre inputs (the shifted
distribution's), as a reference does when another process holds the card while the evaluator opens.
tests/eval/test_eval_distributions.py: that is not the distribution's doing, and it is not dropped."""
import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, x):
        if float(x.mean()) > 1.0:
            raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 1.00 GiB (held by another process)")
        return x * 2


def get_inputs():
    return [torch.randn(64, 64)]


def get_init_inputs():
    return []
