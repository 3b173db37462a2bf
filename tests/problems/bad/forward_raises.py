"""Malformed: Model.forward raises on its own inputs."""
import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, x):
        return x.view(3, -1)


def get_inputs():
    return [torch.randn(64)]


def get_init_inputs():
    return []
