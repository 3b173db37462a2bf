"""Our own candidate for KernelBench level 2 problem 59 (Linear, then x * sigmoid(x), then a
scale): one autotuned Triton GEMM (3xTF32 dots, near-IEEE float32) with the bias, the swish and
the scale fused into its epilogue. The same kernel as matmul_swish.py with the autotuner's
results cached on disk (`cache_results=True`): Triton writes the timings beside the compiled
kernels, so a later process with the same cache directory picks the config without benchmarking."""
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.autotune(
    configs=[
        triton.Config({"BM": 128, "BN": 128, "BK": 32}, num_stages=4, num_warps=8),
        triton.Config({"BM": 64, "BN": 128, "BK": 32}, num_stages=4, num_warps=4),
        triton.Config({"BM": 128, "BN": 64, "BK": 32}, num_stages=4, num_warps=4),
        triton.Config({"BM": 64, "BN": 64, "BK": 64}, num_stages=3, num_warps=4),
    ],
    key=["M", "N", "K"],
    cache_results=True,
)
@triton.jit
def linear_swish_scale(x_ptr, w_ptr, b_ptr, y_ptr, M, N, K, sxm, sxk, swn, swk, sym, syn, scale,
                       BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    rm = pid_m * BM + tl.arange(0, BM)
    rn = pid_n * BN + tl.arange(0, BN)
    rk = tl.arange(0, BK)
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for k in range(0, K, BK):
        kk = k + rk
        a = tl.load(x_ptr + rm[:, None] * sxm + kk[None, :] * sxk, mask=(rm[:, None] < M) & (kk[None, :] < K), other=0.0)
        b = tl.load(w_ptr + rn[None, :] * swn + kk[:, None] * swk, mask=(rn[None, :] < N) & (kk[:, None] < K), other=0.0)
        acc = tl.dot(a, b, acc, input_precision="tf32x3")
    acc += tl.load(b_ptr + rn, mask=rn < N, other=0.0)[None, :]
    out = acc * tl.sigmoid(acc) * scale
    tl.store(y_ptr + rm[:, None] * sym + rn[None, :] * syn, out, mask=(rm[:, None] < M) & (rn[None, :] < N))


class ModelNew(nn.Module):
    def __init__(self, in_features, out_features, scaling_factor):
        super().__init__()
        self.matmul = nn.Linear(in_features, out_features)  # holds the weight and bias
        self.scaling_factor = scaling_factor

    def forward(self, x):
        w, b = self.matmul.weight, self.matmul.bias
        M, K = x.shape
        N = w.shape[0]
        y = torch.empty((M, N), dtype=x.dtype, device=x.device)

        def grid(meta):
            return (triton.cdiv(M, meta["BM"]), triton.cdiv(N, meta["BN"]))

        linear_swish_scale[grid](x, w, b, y, M, N, K, x.stride(0), x.stride(1), w.stride(0), w.stride(1),
                                 y.stride(0), y.stride(1), float(self.scaling_factor))
        return y
