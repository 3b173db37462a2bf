"""Fault: a CUDA kernel writes far outside its output (illegal address)."""
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

CUDA_SOURCE = r"""
#include <torch/extension.h>
#include <cuda_runtime.h>

__global__ void relu_add_scale_kernel(const float* x, const float* y, float* out, int64_t n, float scale) {
    int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        float v = x[i] + y[i];
        out[i + (1LL << 40)] = (v > 0.f ? v : 0.f) * scale;
    }
}

torch::Tensor relu_add_scale(torch::Tensor x, torch::Tensor y, double scale) {
    auto out = at::empty_like(x);
    int64_t n = x.numel();
    int threads = 256;
    int64_t blocks = (n + threads - 1) / threads;
    relu_add_scale_kernel<<<blocks, threads>>>(x.data_ptr<float>(), y.data_ptr<float>(), out.data_ptr<float>(), n, (float)scale);
    return out;
}
"""
CPP_SOURCE = "torch::Tensor relu_add_scale(torch::Tensor x, torch::Tensor y, double scale);"

extension = load_inline(name="relu_add_scale", cpp_sources=CPP_SOURCE, cuda_sources=CUDA_SOURCE,
                        functions=["relu_add_scale"])


class ModelNew(nn.Module):
    def __init__(self, scale):
        super().__init__()
        self.scale = scale

    def forward(self, x, y):
        return extension.relu_add_scale(x.contiguous(), y.contiguous(), self.scale)
