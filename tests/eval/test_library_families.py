"""Library kernels are compared by family (tools/timing/library.py): names vary with shapes and
layouts, the family does not. The kernel names are ones the CUDA profiler reports on an H100."""
from __future__ import annotations

import pytest

from tools.timing.library import _times, family


@pytest.mark.parametrize("name, fam", [
    ("sm90_xmma_gemm_f32f32_f32f32_f32_nn_n_tilesize128x128x16_warpgroupsize1x1x1_execute_segment_k_off_kernel__5x_cublas", "gemm"),
    ("ampere_sgemm_128x64_nn", "gemm"),
    ("cutlass_80_tensorop_s1688gemm_128x128_16x4_nn_align4", "gemm"),
    ("fmha_cutlassF_f32_aligned_64x64_rf_sm80(PyTorchMemEffAttention::AttentionKernel<float>::Params)", "attention"),
    ("void pytorch_flash::flash_fwd_kernel<Flash_fwd_kernel_traits<64, 128>>(Flash_fwd_params)", "attention"),
    ("void (anonymous namespace)::softmax_warp_forward<float, float, float, 10, false, false>(float*, float const*, int, int, int, bool const*, int, bool)", "softmax"),
    ("void at::native::(anonymous namespace)::cunn_SoftMaxForward<4, float, float, float, at::native::(anonymous namespace)::SoftMaxForwardEpilogue>(float*, float const*, long)", "softmax"),
    ("void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<float>, at::detail::Array<char*, 3> >(int, at::native::CUDAFunctor_add<float>, at::detail::Array<char*, 3>)", "elementwise"),
    ("void cudnn::cnn::implicit_convolve_sgemm<float, float, 1024, 5, 5, 3, 3, 3, 1, false, false, true>(int, int, int, float const*, int, float*, float const*, kernel_conv_params, unsigned long long, int, float, float, int, float const*, float const*, bool, int, int)", "conv"),
    ("void at::native::(anonymous namespace)::vectorized_layer_norm_kernel<float, float>(int, float, float const*, float const*, float const*, float*, float*, float*)", "norm"),
    ("void at::native::reduce_kernel<512, 1, at::native::ReduceOp<float, at::native::func_wrapper_t<float, at::native::sum_functor<float, float, float>::operator()(at::TensorIterator&)::{lambda(float, float)#1}>, unsigned int, float, 4, 4> >(at::native::ReduceOp<float, at::native::func_wrapper_t<float, at::native::sum_functor<float, float, float>::operator()(at::TensorIterator&)::{lambda(float, float)#1}>, unsigned int, float, 4, 4>)", "reduce"),
])
def test_kernel_families(name, fam):
    assert family(name) == fam


def test_an_unknown_kernel_is_its_own_family():
    assert family("my_fused_kernel_0d1d2d") == "my_fused_kernel_0d1d2d"


@pytest.mark.parametrize("value", [None, [1.0], {"k": "1"}, {"k": -1.0}, {"k": float("nan")}, {"k": float("inf")}, {"k": True}, {3: 1.0}])
def test_a_malformed_profile_is_refused(value):
    assert _times(value) is None


def test_a_profile_reads_as_floats():
    assert _times({"a": 1, "b": 2.5}) == {"a": 1.0, "b": 2.5}
