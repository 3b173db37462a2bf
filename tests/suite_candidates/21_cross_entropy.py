"""Known-correct: per-row losses (online log-sum-exp), then one program takes their mean."""
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def row_loss_kernel(logits_ptr, targets_ptr, loss_ptr, cols, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    base = logits_ptr + row * cols
    m = tl.full((BLOCK,), float("-inf"), dtype=tl.float32)
    s = tl.zeros((BLOCK,), dtype=tl.float32)
    for start in range(0, cols, BLOCK):
        offs = start + tl.arange(0, BLOCK)
        x = tl.load(base + offs, mask=offs < cols, other=float("-inf"))
        new_m = tl.maximum(m, x)
        safe = tl.where(new_m == float("-inf"), 0.0, new_m)
        s = s * tl.exp(m - safe) + tl.exp(x - safe)
        m = new_m
    row_max = tl.max(m, axis=0)
    lse = tl.log(tl.sum(s * tl.exp(m - row_max), axis=0)) + row_max
    target = tl.load(targets_ptr + row)
    tl.store(loss_ptr + row, lse - tl.load(base + target))


@triton.jit
def sum_partials_kernel(p_ptr, out_ptr, n, scale, BLOCK: tl.constexpr):
    acc = tl.zeros((BLOCK,), dtype=tl.float32)
    for start in range(0, n, BLOCK):
        offs = start + tl.arange(0, BLOCK)
        acc += tl.load(p_ptr + offs, mask=offs < n, other=0.0)
    tl.store(out_ptr, tl.sum(acc, axis=0) * scale)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, logits, targets):
        logits, targets = logits.contiguous(), targets.contiguous()
        rows, cols = logits.shape
        losses = torch.empty(rows, dtype=torch.float32, device=logits.device)
        out = torch.empty((), dtype=logits.dtype, device=logits.device)
        row_loss_kernel[(rows,)](logits, targets, losses, cols, BLOCK=min(2048, triton.next_power_of_2(cols)))
        sum_partials_kernel[(1,)](losses, out, rows, 1.0 / rows, BLOCK=1024)
        return out
