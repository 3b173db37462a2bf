"""Honest, multi-op: per-row losses in a Triton kernel, the mean left to torch."""
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def row_loss_kernel(logits_ptr, targets_ptr, loss_ptr, n_cols, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    x = tl.load(logits_ptr + row * n_cols + cols, mask=mask, other=-float("inf"))
    m = tl.max(x, axis=0)
    lse = tl.log(tl.sum(tl.exp(x - m), axis=0)) + m
    target = tl.load(targets_ptr + row)
    picked = tl.load(logits_ptr + row * n_cols + target)
    tl.store(loss_ptr + row, lse - picked)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, logits, targets):
        logits = logits.contiguous()
        rows, cols = logits.shape
        losses = torch.empty(rows, dtype=logits.dtype, device=logits.device)
        row_loss_kernel[(rows,)](logits, targets, losses, cols, BLOCK=triton.next_power_of_2(cols))
        return losses.mean()
