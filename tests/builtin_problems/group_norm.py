"""Group norm (affine) over (C/G, H, W) per sample and group; channels and groups are literals (a
smaller channel count would not divide into the groups)."""
import torch
import torch.nn as nn

batch_size = 2
dim1 = 6
dim2 = 10


class Model(nn.Module):
    def __init__(self, num_features: int, num_groups: int):
        super().__init__()
        self.gn = nn.GroupNorm(num_groups=num_groups, num_channels=num_features)

    def forward(self, x):
        return self.gn(x)


def get_inputs():
    return [torch.randn(batch_size, 8, dim1, dim2)]


def get_init_inputs():
    return [8, 4]
