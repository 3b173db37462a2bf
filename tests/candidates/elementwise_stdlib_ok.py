"""Honest, with the standard library an honest candidate may use: dataclasses, typing,
enum, collections, itertools, math."""
import collections
import enum
import itertools
import math
from dataclasses import dataclass
from typing import NamedTuple, Optional
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def relu_add_scale_kernel(x_ptr, y_ptr, out_ptr, n, scale, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    x = tl.load(x_ptr + offsets, mask=mask)
    y = tl.load(y_ptr + offsets, mask=mask)
    tl.store(out_ptr + offsets, tl.maximum(x + y, 0.0) * scale, mask=mask)


@dataclass(frozen=True)
class Config:
    block: int = 1024
    warps: Optional[int] = None


class Launch(NamedTuple):
    grid: int
    block: int


class Mode(enum.Enum):
    FAST = 1


Pair = collections.namedtuple("Pair", "a b")
Flavor = enum.Enum("Flavor", "PLAIN FANCY")


def grid_for(n: int, block: int) -> int:
    return math.ceil(n / block)


class ModelNew(nn.Module):
    def __init__(self, scale: float):
        super().__init__()
        self.scale = scale

    def forward(self, x, y):
        out = torch.empty_like(x)
        n = x.numel()
        cfg = Config()
        launch = Launch(triton.cdiv(n, cfg.block), cfg.block)
        assert list(itertools.islice(range(3), 2)) == [0, 1] and Pair(1, 2).a == 1 and Mode.FAST.value == 1
        relu_add_scale_kernel[(launch.grid,)](x, y, out, n, self.scale, BLOCK=launch.block)
        return out
