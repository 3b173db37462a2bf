"""`ratchet optimize --model builtin` end to end on the CPU for each window kind (pooling, scan,
arg-reduction): the real CLI, graph, evaluator (Triton in its interpreter, held-out sizes
included) and workspace; then the kept best passes `ratchet eval` on its own and on the problem
at another batch size."""
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


@pytest.mark.parametrize("problem, batch, other", [
    ("max_pool1d.py", "batch_size, features, length = 5, 6, 40", "batch_size, features, length = 3, 6, 40"),
    ("cumsum_exclusive.py", "batch_size, length = 5, 70", "batch_size, length = 9, 70"),
    ("argmax_mid.py", "batch_size, dim1, dim2 = 2, 33, 10", "batch_size, dim1, dim2 = 3, 33, 10"),
], ids=["pool", "scan", "argreduce"])
def test_builtin_optimizes_and_the_best_evaluates_at_another_batch(problem, batch, other, tmp_path, capsys):
    path = PROBLEMS / problem
    code = main(["optimize", str(path), "--workspace", str(tmp_path / "ws"), "--json", "--model", "builtin",
                 "--max-attempts", "1"])
    out, err = capsys.readouterr()
    assert code == 0, err
    summary = json.loads(out)
    assert summary["model"] == "builtin" and summary["verdicts"] == ["ok"]
    with Workspace(tmp_path / "ws").open_existing(path) as repo:
        best = repo.best_path.read_text()
    candidate = tmp_path / "best.py"
    candidate.write_text(best)
    code = main(["eval", str(path), str(candidate), "--trials", "2"])
    out, err = capsys.readouterr()
    assert code == 0 and out.startswith("best.py: ok"), err
    source = path.read_text()
    assert batch in source
    resized = tmp_path / problem
    resized.write_text(source.replace(batch, other))
    assert main(["eval", str(resized), str(candidate), "--trials", "2", "--json"]) == 0, capsys.readouterr().err
    record = json.loads(capsys.readouterr().out)
    assert record["verdict"] == "ok" and record["generalizes"] is True  # the held-out sizes ran too
