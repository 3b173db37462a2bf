"""Reductions in the fallback family (agent.builtin.fallback_reduce): a forward no family claims
whose work besides its library ops is a min, a softmax, a mean over two dims, a sum kept as a
dim or a log-softmax (KernelBench L2 6, 23, 24 and 78's shapes of work, which ended kept eager) is
drafted with those reductions as kernels of the draft's own: correct beside the reference at its
sizes and at others, in float16 too, and accepted end to end by the evaluator (its held-out
variants and its check that the candidate's own kernels ran included). Where max's indices are
read, the op stays torch's."""
from __future__ import annotations

from pathlib import Path

import pytest
import torch

from agent.builtin import codegen, search
from agent.builtin.recognize import recognize
from helpers_builtin import assert_draft_matches_at_two_sizes, builtin_cpu_env, draft_outputs, evaluates_ok, optimize_builtin

PROBLEMS = Path(__file__).parents[1] / "builtin_problems"
pytestmark = pytest.mark.timeout(240)

# problem -> (the reductions the summary names, the library ops left to torch, other sizes, tolerance)
CASES = {
    "fallback_conv_min_softmax.py": (["min", "softmax"], ["aten.convolution"],
                                     {"batch_size": 3, "out_channels": 4, "depth": 6, "height": 5, "width": 9}, 1e-5),
    "fallback_pool_mean.py": (["mean"], ["aten.convolution", "aten.max_pool2d_with_indices"],
                              {"batch_size": 5, "out_channels": 6, "height": 14, "width": 9}, 1e-5),
    "fallback_pool_sum_logsoftmax.py": (["log_softmax", "sum"], ["aten.max_pool2d_with_indices"],
                                        {"batch_size": 3, "channels": 3, "height": 10, "width": 70}, 4e-3),
}


@pytest.fixture(autouse=True)
def interpreter(monkeypatch):
    monkeypatch.setenv("TRITON_INTERPRET", "1")


@pytest.mark.parametrize("name", sorted(CASES))
def test_reductions_after_library_ops_are_kernels_of_the_drafts_own(name, tmp_path):
    reductions, library, other, tolerance = CASES[name]
    rec = recognize(PROBLEMS / name)
    assert rec.plan is not None and rec.plan.kind == "fallback", rec.reason
    assert f"{', '.join(reductions)} by reduction kernels" in rec.plan.summary, rec.plan.summary
    assert all(op in rec.plan.summary for op in library) and "aten.min " not in rec.plan.summary
    source = codegen.draft(rec.plan, rec.problem, search.space(rec.plan)[0])
    assert source.count("_reduce(") == len(reductions) + 1  # the helper's definition and one call each
    assert_draft_matches_at_two_sizes(PROBLEMS / name, source, tmp_path, other, tolerance)


def test_a_max_whose_indices_are_read_stays_torchs(tmp_path):
    path = tmp_path / "max_indices.py"
    path.write_text(
        (PROBLEMS / "fallback_conv_min_softmax.py").read_text()
        .replace("torch.softmax(torch.min(self.conv(x), dim=2)[0], dim=1)",
                 "torch.softmax(torch.min(self.conv(x), dim=2)[1].float(), dim=1)"))
    rec = recognize(path)
    assert rec.plan is not None and rec.plan.kind == "fallback", rec.reason
    assert "aten.min" in rec.plan.summary and "softmax by reduction kernels" in rec.plan.summary, rec.plan.summary
    source = codegen.draft(rec.plan, rec.problem, search.space(rec.plan)[0])
    expected, got = draft_outputs(path, source, tmp_path)
    torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-5)


def test_builtin_optimizes_a_reduction_after_a_convolution_end_to_end(tmp_path, capsys, monkeypatch):
    builtin_cpu_env(monkeypatch)
    path = PROBLEMS / "fallback_conv_min_softmax.py"
    best, replies = optimize_builtin(path, tmp_path, capsys)
    assert "fallback template" in replies[0] and "_reduce_kernel[" in best
    record = evaluates_ok(path, best, tmp_path, capsys, "--trials", "2")
    assert record["generalizes"] is True  # the held-out variants ran too
