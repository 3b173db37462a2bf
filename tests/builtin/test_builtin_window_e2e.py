"""`ratchet optimize --model builtin` end to end on the CPU for each window kind (pooling, scan,
arg-reduction): the real CLI, graph, evaluator (Triton in its interpreter, held-out sizes
included) and workspace; then the kept best passes `ratchet eval` on its own and on the problem
at another batch size."""
from __future__ import annotations

from pathlib import Path

import pytest

from helpers_builtin import builtin_cpu_env, evaluates_ok, optimize_builtin, resized

PROBLEMS = Path(__file__).parents[1] / "builtin_problems"
pytestmark = pytest.mark.timeout(300)


@pytest.fixture(autouse=True)
def cpu_settings(monkeypatch):
    builtin_cpu_env(monkeypatch)


@pytest.mark.parametrize("problem, batch, other", [
    ("max_pool1d.py", "batch_size, features, length = 5, 6, 40", "batch_size, features, length = 3, 6, 40"),
    ("cumsum_exclusive.py", "batch_size, length = 5, 70", "batch_size, length = 9, 70"),
    ("argmax_mid.py", "batch_size, dim1, dim2 = 2, 33, 10", "batch_size, dim1, dim2 = 3, 33, 10"),
], ids=["pool", "scan", "argreduce"])
def test_builtin_optimizes_and_the_best_evaluates_at_another_batch(problem, batch, other, tmp_path, capsys):
    path = PROBLEMS / problem
    best, _ = optimize_builtin(path, tmp_path, capsys)
    evaluates_ok(path, best, tmp_path, capsys, "--trials", "2")
    record = evaluates_ok(resized(path, tmp_path / "other", line=(batch, other)), best, tmp_path, capsys, "--trials", "2")
    assert record["generalizes"] is True  # the held-out sizes ran too
