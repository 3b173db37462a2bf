"""`ratchet optimize --model builtin` end to end on the CPU for a reduction after a convolution
(agent.builtin.conv_reduce): the real CLI, graph, evaluator (Triton in its interpreter, held-out
sizes included) and git workspace on a conv2d + GroupNorm + scale. The kept best holds both
kernels, passes `ratchet eval` on its own, and on a copy of the problem at another batch and
spatial size (about 20 s on the CPU)."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from agent.cli import main
from agent.workspace import Workspace
from helpers_builtin import builtin_cpu_env

PROBLEM = Path(__file__).parent / "builtin_problems" / "conv2d_groupnorm_scale.py"
SIZES, OTHER = "batch_size, channels, height, width = 2, 3, 9, 8", "batch_size, channels, height, width = 3, 3, 11, 7"
pytestmark = pytest.mark.timeout(300)


@pytest.fixture(autouse=True)
def cpu_settings(monkeypatch):
    builtin_cpu_env(monkeypatch)


def test_builtin_optimizes_a_conv_group_norm_and_the_best_evaluates_at_other_sizes(tmp_path, capsys):
    code = main(["optimize", str(PROBLEM), "--workspace", str(tmp_path / "ws"), "--json", "--model", "builtin",
                 "--max-attempts", "1"])
    out, err = capsys.readouterr()
    assert code == 0, err
    summary = json.loads(out)
    assert summary["model"] == "builtin" and summary["verdicts"] == ["ok"]
    with Workspace(tmp_path / "ws").open_existing(PROBLEM) as repo:
        best = repo.best_path.read_text()
    assert "conv_igemm_kernel[grid]" in best and "fused_rowwise_kernel[grid]" in best
    assert 'input_precision="tf32"' not in best
    candidate = tmp_path / "best.py"
    candidate.write_text(best)
    code = main(["eval", str(PROBLEM), str(candidate), "--trials", "2"])
    out, err = capsys.readouterr()
    assert code == 0 and out.startswith("best.py: ok"), err
    source = PROBLEM.read_text()
    assert SIZES in source
    resized = tmp_path / PROBLEM.name
    resized.write_text(source.replace(SIZES, OTHER))
    assert main(["eval", str(resized), str(candidate), "--trials", "2", "--json"]) == 0, capsys.readouterr().err
    record = json.loads(capsys.readouterr().out)
    assert record["verdict"] == "ok" and record["generalizes"] is True  # the held-out sizes ran too
