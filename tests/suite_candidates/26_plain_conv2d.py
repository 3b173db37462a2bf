"""Known-correct: the convolution as an implicit GEMM in Triton (rows: output pixels, columns: output channels)."""
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def conv2d_kernel(x_ptr, w_ptr, y_ptr, batch, c_in, height, width, c_out, out_h, out_w, pad,
                  KH: tl.constexpr, KW: tl.constexpr, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    rm = pid_m * BM + tl.arange(0, BM)  # output pixel: (n, oh, ow)
    rn = pid_n * BN + tl.arange(0, BN)  # output channel
    n = rm // (out_h * out_w)
    oh = (rm // out_w) % out_h
    ow = rm % out_w
    M = batch * out_h * out_w
    K = c_in * KH * KW
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for k0 in range(0, K, BK):
        rk = k0 + tl.arange(0, BK)  # reduction index: (c, kh, kw)
        c = rk // (KH * KW)
        kh = (rk // KW) % KH
        kw = rk % KW
        ih = oh[:, None] + kh[None, :] - pad
        iw = ow[:, None] + kw[None, :] - pad
        inside = (rm[:, None] < M) & (rk[None, :] < K) & (ih >= 0) & (ih < height) & (iw >= 0) & (iw < width)
        x = tl.load(x_ptr + ((n[:, None] * c_in + c[None, :]) * height + ih) * width + iw, mask=inside, other=0.0)
        w = tl.load(w_ptr + rn[None, :] * K + rk[:, None], mask=(rk[:, None] < K) & (rn[None, :] < c_out), other=0.0)
        acc += tl.dot(x, w, input_precision="tf32x3")  # float32 accuracy on tensor cores (the float64-judged bound)
    out = y_ptr + ((n[:, None] * c_out + rn[None, :]) * out_h + oh[:, None]) * out_w + ow[:, None]
    tl.store(out, acc, mask=(rm[:, None] < M) & (rn[None, :] < c_out))


class ModelNew(nn.Module):
    def __init__(self, c_in: int, c_out: int):
        super().__init__()
        self.conv = nn.Conv2d(c_in, c_out, kernel_size=3, padding=1, bias=False)

    def forward(self, x):
        x = x.contiguous()
        weight = self.conv.weight.contiguous()
        batch, c_in, height, width = x.shape
        c_out, _, kh, kw = weight.shape
        pad = 1
        out_h, out_w = height + 2 * pad - kh + 1, width + 2 * pad - kw + 1
        y = torch.empty((batch, c_out, out_h, out_w), dtype=x.dtype, device=x.device)
        grid = (triton.cdiv(batch * out_h * out_w, 64), triton.cdiv(c_out, 32))
        conv2d_kernel[grid](x, weight, y, batch, c_in, height, width, c_out, out_h, out_w, pad,
                            KH=kh, KW=kw, BM=64, BN=32, BK=32)
        return y
