"""`ratchet optimize --model builtin` end to end on the CPU for attention (agent.builtin.attention):
the real CLI, graph, evaluator (Triton in its interpreter, held-out sizes included) and git
workspace. The kept best then passes `ratchet eval` on its own, and on a copy of the problem at
another batch size and sequence length."""
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


def test_builtin_optimizes_causal_attention_and_the_best_is_a_drop_in(tmp_path, capsys):
    path = PROBLEMS / "attention_written_causal.py"
    best, replies = optimize_builtin(path, tmp_path, capsys, attempts=2)
    assert all("attention template" in reply for reply in replies)
    configs = [parse_config(reply) for reply in replies]
    assert len({json.dumps(c, sort_keys=True) for c in configs}) == 2
    assert all(c["precision"] in ("ieee", "tf32x3") for c in configs)
    assert 'input_precision="tf32"' not in best and best.count("@triton.jit") == 1
    evaluates_ok(path, best, tmp_path, capsys, "--device", "cpu", "--no-timing")
    other = resized(path, tmp_path / "other_sizes", {"batch_size": 3, "seq_len": 29})
    evaluates_ok(other, best, tmp_path, capsys, "--device", "cpu", "--no-timing")
