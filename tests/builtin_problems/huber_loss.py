"""Huber loss with its delta from the constructor (F.huber_loss), mean reduction."""
import torch
import torch.nn as nn
import torch.nn.functional as F

batch_size = 16
dim = 64


class Model(nn.Module):
    def __init__(self, delta: float):
        super().__init__()
        self.delta = delta

    def forward(self, predictions, targets):
        return F.huber_loss(predictions, targets, delta=self.delta)


def get_inputs():
    return [torch.randn(batch_size, dim) * 2.0, torch.randn(batch_size, dim)]


def get_init_inputs():
    return [1.5]
