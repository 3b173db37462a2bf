"""`ratchet optimize --model builtin` end to end on the CPU for the reduction families (the real
CLI, graph, evaluator with Triton in its interpreter, and git workspace): a loss over every
element (split across programs, two launches), layer norm over long rows (split, three passes)
and the cosine similarity loss (row reductions, then a mean over the rows). The kept best then
passes `ratchet eval` on its own and on a copy of the problem with another batch size."""
from __future__ import annotations

from pathlib import Path

import pytest

from helpers_builtin import builtin_cpu_env, evaluates_ok, optimize_builtin, resized

PROBLEMS = Path(__file__).parents[1] / "builtin_problems"
pytestmark = pytest.mark.timeout(300)


@pytest.fixture(autouse=True)
def cpu_settings(monkeypatch):
    builtin_cpu_env(monkeypatch)


@pytest.mark.parametrize("name, batch, kernels", [
    ("mse_loss.py", 45, ("split_partial0_kernel", "split_finish_kernel")),
    ("layernorm_long.py", 3, ("split_partial0_kernel", "split_apply_kernel")),
    ("cosine_loss.py", 13, ("rows_partial_kernel", "all_finish_kernel")),
], ids=["loss_split", "layernorm_split", "two_levels"])
def test_builtin_drafts_a_correct_reduction_that_takes_another_batch(name, batch, kernels, tmp_path, capsys):
    problem = PROBLEMS / name
    best, _ = optimize_builtin(problem, tmp_path, capsys)
    assert all(f"{kernel}[" in best for kernel in kernels)
    evaluates_ok(problem, best, tmp_path, capsys, "--device", "cpu", "--no-timing")
    other = resized(problem, tmp_path / "other", {"batch_size": batch})
    evaluates_ok(other, best, tmp_path, capsys, "--device", "cpu", "--no-timing")
