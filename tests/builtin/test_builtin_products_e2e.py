"""`ratchet optimize --model builtin` end to end on the CPU for the product families (a streamed
matrix-vector product; a product followed by a reduction): the real CLI, graph, evaluator (Triton
in its interpreter, held-out sizes included) and git workspace. The kept best then passes
`ratchet eval` on its own, and on a copy of the problem at other sizes (another batch)."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from agent.builtin.policy import parse_config
from helpers_builtin import builtin_cpu_env, evaluates_ok, optimize_builtin, resized

PROBLEMS = Path(__file__).parents[1] / "builtin_problems"
pytestmark = pytest.mark.timeout(300)


@pytest.fixture(autouse=True)
def cpu_settings(monkeypatch):
    builtin_cpu_env(monkeypatch)
    monkeypatch.setenv("RATCHET_STOP_UNTIMED", "0")  # walk on past the first correct kernel, as on a GPU


@pytest.mark.parametrize("problem, template, other", [
    ("gemv.py", "gemv", {"M": 29, "K": 1031}),
    ("linear_softmax.py", "mm_reduce", {"batch_size": 5, "in_features": 50, "out_features": 130}),
], ids=["gemv", "mm_reduce"])
def test_builtin_optimizes_and_the_best_is_a_drop_in(problem, template, other, tmp_path, capsys):
    path = PROBLEMS / problem
    best, replies = optimize_builtin(path, tmp_path, capsys, attempts=2)
    assert all(f"{template} template" in reply for reply in replies)
    assert len({json.dumps(parse_config(reply), sort_keys=True) for reply in replies}) == 2
    evaluates_ok(path, best, tmp_path, capsys, "--device", "cpu", "--no-timing")
    evaluates_ok(resized(path, tmp_path / "other_sizes", other), best, tmp_path, capsys, "--device", "cpu",
                 "--no-timing")
