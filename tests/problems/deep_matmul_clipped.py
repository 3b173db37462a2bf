"""A deep product scaled down by its global norm when that is over 2e4 (as gradient clipping
does): (64 x 512) @ (512 x 64) on non-negative inputs. On the problem's own inputs the norm is
about 8e3 and no row depends on another; on shifted and stress inputs the clip acts and every row
depends on the whole product: rows judged at open on the problem's inputs alone would be taken
for independent."""
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, a, b):
        c = torch.matmul(a, b)
        return c * torch.clamp(2.0e4 / c.norm(), max=1.0)


def get_inputs():
    return [torch.rand(64, 512), torch.rand(512, 64)]


def get_init_inputs():
    return []
