"""Honest: relu(x + y) * scale, after filling a cache the way Triton's does on a GPU (its
driver module and every compiled kernel): a file written in a temporary directory, then moved
into place in the directory above. The sandbox must allow moves below the worker's own
writable directories (landlock's REFER right, in each of its layers)."""
import os
import tempfile

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


def fill_cache() -> None:
    root = tempfile.mkdtemp(prefix="cache-")
    staging = os.path.join(root, "tmp.pid_1")
    os.makedirs(staging)
    with open(os.path.join(staging, "kernel.bin"), "wb") as f:
        f.write(b"\0" * 64)
    os.replace(os.path.join(staging, "kernel.bin"), os.path.join(root, "kernel.bin"))
    os.rmdir(staging)


class ModelNew(nn.Module):
    def __init__(self, scale: float):
        super().__init__()
        self.scale = scale
        fill_cache()

    def forward(self, x, y):
        out = torch.empty_like(x)
        n = x.numel()
        relu_add_scale_kernel[(triton.cdiv(n, 1024),)](x, y, out, n, self.scale, BLOCK=1024)
        return out
