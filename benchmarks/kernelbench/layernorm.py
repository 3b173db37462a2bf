"""Our own candidate for KernelBench level 1 problem 40 (LayerNorm over the last dimensions):
each row is cut into chunks; per chunk a mean and a sum of squared deviations (two passes over
the chunk), combined per row (Chan's formula) into the mean and 1/std, then one normalizing pass
with the affine weight and bias."""
import math

import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def chunk_stats(x_ptr, mean_ptr, m2_ptr, n, chunks, CHUNK: tl.constexpr, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    c = tl.program_id(1)
    base = x_ptr + row * n
    lo = c * CHUNK
    acc = tl.zeros([BLOCK], tl.float32)
    for start in range(0, CHUNK, BLOCK):
        offs = lo + start + tl.arange(0, BLOCK)
        acc += tl.load(base + offs, mask=offs < n, other=0.0).to(tl.float32)
    count = tl.minimum(n - lo, CHUNK).to(tl.float32)
    mean = tl.sum(acc, axis=0) / count
    acc = tl.zeros([BLOCK], tl.float32)
    for start in range(0, CHUNK, BLOCK):
        offs = lo + start + tl.arange(0, BLOCK)
        mask = offs < n
        d = tl.where(mask, tl.load(base + offs, mask=mask, other=0.0).to(tl.float32) - mean, 0.0)
        acc += d * d
    tl.store(mean_ptr + row * chunks + c, mean)
    tl.store(m2_ptr + row * chunks + c, tl.sum(acc, axis=0))


@triton.jit
def row_stats(mean_ptr, m2_ptr, out_ptr, n, chunks, eps, CHUNK: tl.constexpr, BLOCK_C: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    idx = tl.arange(0, BLOCK_C)
    live = idx < chunks
    means = tl.load(mean_ptr + row * chunks + idx, mask=live, other=0.0)
    m2s = tl.load(m2_ptr + row * chunks + idx, mask=live, other=0.0)
    counts = tl.where(live, tl.minimum(n - idx * CHUNK, CHUNK).to(tl.float32), 0.0)
    mean = tl.sum(counts * means, axis=0) / n
    d = means - mean
    var = (tl.sum(m2s, axis=0) + tl.sum(counts * d * d, axis=0)) / n
    tl.store(out_ptr + row * 2, mean)
    tl.store(out_ptr + row * 2 + 1, 1.0 / tl.sqrt(var + eps))


@triton.jit
def normalize(x_ptr, w_ptr, b_ptr, stats_ptr, y_ptr, n, CHUNK: tl.constexpr, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    c = tl.program_id(1)
    mean = tl.load(stats_ptr + row * 2)
    rstd = tl.load(stats_ptr + row * 2 + 1)
    for start in range(0, CHUNK, BLOCK):
        offs = c * CHUNK + start + tl.arange(0, BLOCK)
        mask = offs < n
        x = tl.load(x_ptr + row * n + offs, mask=mask, other=0.0).to(tl.float32)
        w = tl.load(w_ptr + offs, mask=mask, other=0.0).to(tl.float32)
        b = tl.load(b_ptr + offs, mask=mask, other=0.0).to(tl.float32)
        tl.store(y_ptr + row * n + offs, ((x - mean) * rstd * w + b).to(y_ptr.dtype.element_ty), mask=mask)


class ModelNew(nn.Module):
    def __init__(self, normalized_shape: tuple):
        super().__init__()
        self.ln = nn.LayerNorm(normalized_shape=normalized_shape)  # holds the weight, bias and eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.contiguous()
        n = math.prod(self.ln.normalized_shape)
        rows = x.numel() // n
        block = 1024
        chunk = max(block, min(16384, triton.next_power_of_2(triton.cdiv(n, 512))))
        chunks = triton.cdiv(n, chunk)
        means = torch.empty((rows, chunks), dtype=torch.float32, device=x.device)
        m2s = torch.empty_like(means)
        stats = torch.empty((rows, 2), dtype=torch.float32, device=x.device)
        y = torch.empty_like(x)
        chunk_stats[(rows, chunks)](x, means, m2s, n, chunks, CHUNK=chunk, BLOCK=block, num_warps=4)
        row_stats[(rows,)](means, m2s, stats, n, chunks, self.ln.eps, CHUNK=chunk,
                           BLOCK_C=max(16, triton.next_power_of_2(chunks)), num_warps=4)
        normalize[(rows, chunks)](x, self.ln.weight, self.ln.bias, stats, y, n, CHUNK=chunk, BLOCK=block, num_warps=4)
        return y
