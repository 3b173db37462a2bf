"""Honest: Linear + ReLU in one Triton kernel, the weight transposed once in __init__ (a K x N
copy read row by row), as a tuned kernel keeps it; the float64 bound accepts the other order."""
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def linear_relu_kernel(x_ptr, wt_ptr, b_ptr, out_ptr, M, N, K, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    rm = tl.program_id(0) * BM + tl.arange(0, BM)
    rn = tl.program_id(1) * BN + tl.arange(0, BN)
    rk = tl.arange(0, BK)
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for k in range(0, K, BK):
        x = tl.load(x_ptr + rm[:, None] * K + (k + rk)[None, :], mask=(rm[:, None] < M) & ((k + rk)[None, :] < K), other=0.0)
        w = tl.load(wt_ptr + (k + rk)[:, None] * N + rn[None, :], mask=((k + rk)[:, None] < K) & (rn[None, :] < N), other=0.0)
        acc += tl.dot(x, w, allow_tf32=False)
    bias = tl.load(b_ptr + rn, mask=rn < N, other=0.0)
    acc = tl.maximum(acc + bias[None, :], 0.0)
    tl.store(out_ptr + rm[:, None] * N + rn[None, :], acc, mask=(rm[:, None] < M) & (rn[None, :] < N))


class ModelNew(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)
        self.register_buffer("wt", self.linear.weight.detach().t().contiguous())

    def forward(self, x):
        x = x.contiguous()
        M, K = x.shape
        N = self.wt.shape[1]
        out = torch.empty((M, N), dtype=x.dtype, device=x.device)
        linear_relu_kernel[(triton.cdiv(M, 16), triton.cdiv(N, 32))](x, self.wt, self.linear.bias, out, M, N, K, BM=16, BN=32, BK=32)
        return out
