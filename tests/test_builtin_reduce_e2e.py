"""`ratchet optimize --model builtin` end to end on the CPU for the reduction families (the real
CLI, graph, evaluator with Triton in its interpreter, and git workspace): a loss over every
element (split across programs, two launches), layer norm over long rows (split, three passes)
and the cosine similarity loss (row reductions, then a mean over the rows). The kept best then
passes `ratchet eval` on its own and on a copy of the problem with another batch size."""
from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from agent.cli import main
from helpers_builtin import builtin_cpu_env

HERE = Path(__file__).parent
PROBLEMS = HERE / "builtin_problems"
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
    code = main(["optimize", str(problem), "--workspace", str(tmp_path / "ws"), "--json", "--model", "builtin",
                 "--max-attempts", "1"])
    out, err = capsys.readouterr()
    assert code == 0, err
    summary = json.loads(out)
    assert summary["verdicts"] == ["ok"] and summary["tokens_used"] == 0
    best = Path(summary["best_path"]).read_text()
    assert all(f"{kernel}[" in best for kernel in kernels)
    candidate = tmp_path / "best.py"
    candidate.write_text(best)
    assert main(["eval", str(problem), str(candidate), "--device", "cpu", "--no-timing"]) == 0, capsys.readouterr()
    capsys.readouterr()
    other = tmp_path / name  # the same problem with another batch size
    source, count = re.subn(r"^batch_size = \d+$", f"batch_size = {batch}", problem.read_text(), flags=re.M)
    assert count == 1
    other.write_text(source)
    assert main(["eval", str(other), str(candidate), "--device", "cpu", "--no-timing"]) == 0, capsys.readouterr()
    out, _ = capsys.readouterr()
    assert out.splitlines()[0] == f"{candidate.name}: ok"
