"""Instance norm over (H, W) per sample and channel."""
import torch
import torch.nn as nn

batch_size = 2
features = 4
dim1 = 8
dim2 = 12


class Model(nn.Module):
    def __init__(self, num_features: int):
        super().__init__()
        self.inorm = nn.InstanceNorm2d(num_features=num_features)

    def forward(self, x):
        return self.inorm(x)


def get_inputs():
    return [torch.randn(batch_size, features, dim1, dim2)]


def get_init_inputs():
    return [features]
