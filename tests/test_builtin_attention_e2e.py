"""`ratchet optimize --model builtin` end to end on the CPU for attention (agent.builtin.attention):
the real CLI, graph, evaluator (Triton in its interpreter, held-out sizes included) and git
workspace. The kept best then passes `ratchet eval` on its own, and on a copy of the problem at
another batch size and sequence length."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from agent.builtin.policy import parse_config
from agent.cli import main
from agent.workspace import Workspace
from helpers_builtin import builtin_cpu_env
from test_builtin_products_e2e import _resized

PROBLEMS = Path(__file__).parent / "builtin_problems"
pytestmark = pytest.mark.timeout(300)


@pytest.fixture(autouse=True)
def cpu_settings(monkeypatch):
    builtin_cpu_env(monkeypatch)
    monkeypatch.setenv("RATCHET_STOP_UNTIMED", "0")  # walk on past the first correct kernel, as on a GPU


def test_builtin_optimizes_causal_attention_and_the_best_is_a_drop_in(tmp_path, capsys):
    path = PROBLEMS / "attention_written_causal.py"
    code = main(["optimize", str(path), "--workspace", str(tmp_path / "ws"), "--json", "--model", "builtin",
                 "--max-attempts", "2"])
    out, err = capsys.readouterr()
    assert code == 0, err
    summary = json.loads(out)
    assert summary["model"] == "builtin" and summary["verdicts"] == ["ok", "ok"]
    with Workspace(tmp_path / "ws").open_existing(path) as repo:
        best = repo.best_path.read_text()
        [saved] = repo.trajectories()
    replies = [m.get("content") for m in json.loads(saved.text)["messages"] if m["role"] == "assistant"]
    assert all("attention template" in reply for reply in replies)
    configs = [parse_config(reply) for reply in replies]
    assert len({json.dumps(c, sort_keys=True) for c in configs}) == 2
    assert all(c["precision"] in ("ieee", "tf32x3") for c in configs)
    assert 'input_precision="tf32"' not in best and best.count("@triton.jit") == 1
    candidate = tmp_path / "best.py"
    candidate.write_text(best)
    assert main(["eval", str(path), str(candidate), "--device", "cpu", "--no-timing"]) == 0, capsys.readouterr().out
    resized = _resized(path, {"batch_size": 3, "seq_len": 29}, tmp_path / "other_sizes")
    assert main(["eval", str(resized), str(candidate), "--device", "cpu", "--no-timing"]) == 0, capsys.readouterr().out
