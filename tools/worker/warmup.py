"""A kernel of the worker's own, launched once before any candidate (prewarm in
tools/worker/worker.py): it pays Triton's one-time costs (its driver module, the launcher's
machinery) in a worker that has not yet been handed a candidate, whose compiled files the parent
keeps as the tools layer (tools/processes/builds.py)."""
from __future__ import annotations

from typing import TYPE_CHECKING

import triton
import triton.language as tl

if TYPE_CHECKING:
    import torch


@triton.jit
def _copy(src_ptr, dst_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    tl.store(dst_ptr + offsets, tl.load(src_ptr + offsets, mask=mask), mask=mask)


def launch(device: "torch.device") -> None:
    """Copy 16 floats on `device` with the kernel above (compiling it the first time)."""
    import torch

    src = torch.ones(16, device=device)
    dst = torch.empty_like(src)
    _copy[(1,)](src, dst, src.numel(), BLOCK=16)
    torch.cuda.synchronize(device)
