"""(1024 x 4096) @ (4096 x 1024) on non-negative inputs, plus the product's mean over the batch:
with float64_max_mb=0 no row stands alone, so the float64 judging is on elements of sets evaluated
in host memory (tools/judge/exact_host.py)."""
import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, a, b):
        c = a @ b
        return c + c.mean(dim=0, keepdim=True)


def get_inputs():
    return [torch.rand(1024, 4096), torch.rand(4096, 1024)]


def get_init_inputs():
    return []
