"""`ratchet optimize --model builtin` end to end on the CPU for convolutions (agent.builtin.conv)
and a reduction after one (agent.builtin.conv_reduce: conv2d + GroupNorm + scale, two kernels):
the real CLI, graph, evaluator (Triton in its interpreter, held-out sizes included) and git
workspace. The kept best then passes `ratchet eval` on its own, and on a copy of the problem at
another batch and spatial size. (tests/builtin_problems/conv1d_depthwise.py, the direct kernel's,
runs through ratchet eval the same way in about 20 s more: the unit tests cover it instead.)"""
from __future__ import annotations

from pathlib import Path

import pytest

from helpers_builtin import builtin_cpu_env, evaluates_ok, optimize_builtin, resized

PROBLEMS = Path(__file__).parents[1] / "builtin_problems"
SIZES, OTHER = "batch_size, channels, height, width = 2, 3, 9, 8", "batch_size, channels, height, width = 3, 3, 11, 7"
pytestmark = pytest.mark.timeout(300)


@pytest.fixture(autouse=True)
def cpu_settings(monkeypatch):
    builtin_cpu_env(monkeypatch)


@pytest.mark.parametrize("problem, kernels", [
    ("conv2d_bias_relu.py", ("conv_igemm_kernel",)),
    ("conv2d_groupnorm_scale.py", ("conv_igemm_kernel", "fused_rowwise_kernel")),
], ids=["conv2d", "conv2d_groupnorm"])
def test_builtin_optimizes_and_the_best_evaluates_at_other_sizes(problem, kernels, tmp_path, capsys):
    path = PROBLEMS / problem
    best, _ = optimize_builtin(path, tmp_path, capsys)
    assert all(f"{kernel}[grid]" in best for kernel in kernels)
    assert 'input_precision="tf32"' not in best
    evaluates_ok(path, best, tmp_path, capsys, "--trials", "2")
    record = evaluates_ok(resized(path, tmp_path / "other", line=(SIZES, OTHER)), best, tmp_path, capsys, "--trials", "2")
    assert record["generalizes"] is True  # the held-out sizes ran too
