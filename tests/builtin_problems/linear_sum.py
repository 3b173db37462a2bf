"""nn.Linear, divided by 2, summed over the features, scaled: a product followed by a reduction."""
import torch
import torch.nn as nn

batch_size = 20
in_features = 40
out_features = 36


class Model(nn.Module):
    def __init__(self, in_features: int, out_features: int, scale: float):
        super().__init__()
        self.fc = nn.Linear(in_features, out_features)
        self.scale = scale

    def forward(self, x):
        x = self.fc(x) / 2
        x = torch.sum(x, dim=1, keepdim=True)
        return x * self.scale


def get_inputs():
    return [torch.randn(batch_size, in_features)]


def get_init_inputs():
    return [in_features, out_features, 1.5]
