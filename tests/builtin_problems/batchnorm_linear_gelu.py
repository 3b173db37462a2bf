"""A Linear, a learned per-feature scale, BatchNorm1d in training mode (batch statistics; the
running ones updated), GELU, ReLU and a division by a module scalar. The inputs sit far from
zero (x * 3 + 5), where a one-pass variance loses digits."""
import torch
import torch.nn as nn

batch_size, in_features, out_features = 12, 10, 20


class Model(nn.Module):
    def __init__(self, n_in: int, n_out: int, eps: float = 1e-5, momentum: float = 0.1):
        super().__init__()
        self.gemm = nn.Linear(n_in, n_out)
        self.scale = nn.Parameter(torch.randn(n_out))
        self.bn = nn.BatchNorm1d(n_out, eps=eps, momentum=momentum)
        self.divisor = 2.0

    def forward(self, x):
        x = self.bn(self.gemm(x) * self.scale)
        return torch.relu(torch.nn.functional.gelu(x)) / self.divisor


def get_inputs():
    return [torch.randn(batch_size, in_features) * 3 + 5]


def get_init_inputs():
    return [in_features, out_features]
