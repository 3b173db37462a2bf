"""A batch of matrices times one matrix, written as an einsum (KernelBench L1 11's shape of work):
torch's einsum puts permutes that move only dims of size 1 around its batched product, which the
lowering reads as reshapes, so the matmul family takes it."""
import torch
import torch.nn as nn

groups = 3
rows = 10
cols = 7
inner = 12
outer = 9


class Model(nn.Module):
    def forward(self, a, w):
        return torch.einsum("grcn,nm->grcm", a, w)


def get_inputs():
    return [torch.randn(groups, rows, cols, inner), torch.randn(inner, outer)]


def get_init_inputs():
    return []
