"""`ratchet optimize --model builtin` end to end on the CPU for convolutions (agent.builtin.conv):
the real CLI, graph, evaluator (Triton in its interpreter, held-out sizes included) and git
workspace. The kept best then passes `ratchet eval` on its own, and on a copy of the problem at
another batch and spatial size. (tests/builtin_problems/conv1d_depthwise.py, the direct kernel's,
runs through ratchet eval the same way in about 20 s more: the unit tests cover it instead.)"""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from agent.cli import main
from agent.workspace import Workspace
from helpers_builtin import builtin_cpu_env

HERE = Path(__file__).parent
PROBLEMS = HERE / "builtin_problems"
pytestmark = pytest.mark.timeout(300)


@pytest.fixture(autouse=True)
def cpu_settings(monkeypatch):
    builtin_cpu_env(monkeypatch)


@pytest.mark.parametrize("problem, kernel, sizes, other", [
    ("conv2d_bias_relu.py", "conv_igemm_kernel", "batch_size, channels, height, width = 2, 3, 9, 8",
     "batch_size, channels, height, width = 3, 3, 11, 7"),
], ids=["conv2d"])
def test_builtin_optimizes_and_the_best_evaluates_at_other_sizes(problem, kernel, sizes, other, tmp_path, capsys):
    path = PROBLEMS / problem
    code = main(["optimize", str(path), "--workspace", str(tmp_path / "ws"), "--json", "--model", "builtin",
                 "--max-attempts", "1"])
    out, err = capsys.readouterr()
    assert code == 0, err
    summary = json.loads(out)
    assert summary["model"] == "builtin" and summary["verdicts"] == ["ok"]
    with Workspace(tmp_path / "ws").open_existing(path) as repo:
        best = repo.best_path.read_text()
    assert f"{kernel}[grid]" in best and 'input_precision="tf32"' not in best
    candidate = tmp_path / "best.py"
    candidate.write_text(best)
    code = main(["eval", str(path), str(candidate), "--trials", "2"])
    out, err = capsys.readouterr()
    assert code == 0 and out.startswith("best.py: ok"), err
    source = path.read_text()
    assert sizes in source
    resized = tmp_path / problem
    resized.write_text(source.replace(sizes, other))
    assert main(["eval", str(resized), str(candidate), "--trials", "2", "--json"]) == 0, capsys.readouterr().err
    record = json.loads(capsys.readouterr().out)
    assert record["verdict"] == "ok" and record["generalizes"] is True  # the held-out sizes ran too
