"""nn.Linear on a batch of 3, then tanh: a product with 3 rows, streamed as 3 vectors at once."""
import torch
import torch.nn as nn

batch_size = 3
in_features = 200
out_features = 56


class Model(nn.Module):
    def __init__(self, in_features: int, out_features: int):
        super().__init__()
        self.fc = nn.Linear(in_features, out_features)

    def forward(self, x):
        return torch.tanh(self.fc(x))


def get_inputs():
    return [torch.randn(batch_size, in_features)]


def get_init_inputs():
    return [in_features, out_features]
