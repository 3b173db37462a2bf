"""nn.Linear, GELU, softmax over the features: full normalized rows after a product."""
import torch
import torch.nn as nn
import torch.nn.functional as F

batch_size = 12
in_features = 32
out_features = 90


class Model(nn.Module):
    def __init__(self, in_features: int, out_features: int):
        super().__init__()
        self.fc = nn.Linear(in_features, out_features)

    def forward(self, x):
        return torch.softmax(F.gelu(self.fc(x)), dim=1)


def get_inputs():
    return [torch.randn(batch_size, in_features)]


def get_init_inputs():
    return [in_features, out_features]
