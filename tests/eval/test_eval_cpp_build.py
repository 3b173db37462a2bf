"""The load_inline path on the CPU: a C++ extension candidate builds through ratchet's builder
(unique name, build directory per source hash, lock), evaluates ok, builds only once for the
same sources, and a compiler error comes back as compile_error naming its line.

A CPU extension stands in for CUDA C++ here (the CPU build of torch cannot compile .cu files);
tests/eval/test_eval_gpu.py covers CUDA sources on a GPU.
"""
from __future__ import annotations

from pathlib import Path

import pytest

from tools.evaluate import EvalOptions, Evaluator
from tools.record import Verdict

PROBLEM = Path(__file__).parents[1] / "problems" / "elementwise.py"

CPP = '''
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

SOURCE = """
#include <torch/extension.h>
torch::Tensor relu_add_scale(torch::Tensor x, torch::Tensor y, double scale) {
    auto out = torch::empty_like(x);
    auto xa = x.contiguous(), ya = y.contiguous();
    const float* xp = xa.data_ptr<float>();
    const float* yp = ya.data_ptr<float>();
    float* op = out.data_ptr<float>();
    for (long i = 0; i < x.numel(); ++i) {
        float v = xp[i] + yp[i];
        op[i] = (v > 0.0f ? v : 0.0f) * (float)scale;
    }
    return out;
}
"""
extension = load_inline(name="relu_add_scale_cpu", cpp_sources=SOURCE, functions=["relu_add_scale"])


class ModelNew(nn.Module):
    def __init__(self, scale):
        super().__init__()
        self.scale = scale

    def forward(self, x, y):
        return extension.relu_add_scale(x, y, self.scale)
'''

BROKEN = CPP.replace("float v = xp[i] + yp[i];", "float v = xp[i] + undefined_name;")


@pytest.fixture(scope="module")
def evaluator(tmp_path_factory):
    options = EvalOptions(device="cpu", trials=2, timing=False, warm=False, build_timeout=600,
                          cache_dir=tmp_path_factory.mktemp("cache"))
    with Evaluator(PROBLEM, options) as ev:
        yield ev


def test_cpp_extension_builds_once_and_is_accepted(evaluator):
    first = evaluator.evaluate(CPP)
    assert first.verdict is Verdict.OK, first.message
    assert first.kernel_launches >= 1  # calls into the extension count as the candidate's kernel
    assert first.phases["cuda_build"] > 0 and "cuda-build" in [c.name for c in first.checks]  # in the build sandbox
    assert "cuda_load" in first.phases  # the test worker loaded what the build step made
    second = evaluator.evaluate(CPP)
    assert second.verdict is Verdict.OK, second.message
    assert "cuda_build" not in second.phases and "cuda_load" in second.phases  # loaded from the cache, not built


def test_compiler_error_names_its_line(evaluator):
    r = evaluator.evaluate(BROKEN)
    assert r.verdict is Verdict.COMPILE_ERROR, r.message
    assert "undefined_name" in r.message and "main.cpp" in r.message
