"""Cosine similarity loss: mean(1 - cosine_similarity(a, b, dim=1)): row reductions, then a mean over the rows."""
import torch
import torch.nn as nn
import torch.nn.functional as F

batch_size = 24
dim = 100


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, predictions, targets):
        return torch.mean(1 - F.cosine_similarity(predictions, targets, dim=1))


def get_inputs():
    return [torch.randn(batch_size, dim), torch.randn(batch_size, dim)]


def get_init_inputs():
    return []
