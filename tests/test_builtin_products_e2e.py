"""`ratchet optimize --model builtin` end to end on the CPU for the product families (a streamed
matrix-vector product; a product followed by a reduction): the real CLI, graph, evaluator (Triton
in its interpreter, held-out sizes included) and git workspace. The kept best then passes
`ratchet eval` on its own, and on a copy of the problem at other sizes (another batch)."""
from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from agent.builtin.policy import parse_config
from agent.cli import main
from agent.workspace import Workspace
from helpers_builtin import builtin_cpu_env

HERE = Path(__file__).parent
PROBLEMS = HERE / "builtin_problems"
pytestmark = pytest.mark.timeout(300)


@pytest.fixture(autouse=True)
def cpu_settings(monkeypatch):
    builtin_cpu_env(monkeypatch)
    monkeypatch.setenv("RATCHET_STOP_UNTIMED", "0")  # walk on past the first correct kernel, as on a GPU


def _resized(problem: Path, sizes: dict[str, int], directory: Path) -> Path:
    """A copy of the problem with its module-level sizes set to other values."""
    text = problem.read_text()
    for name, value in sizes.items():
        text, count = re.subn(rf"^{name} = \d+$", f"{name} = {value}", text, flags=re.MULTILINE)
        assert count == 1, name
    directory.mkdir()
    path = directory / problem.name
    path.write_text(text)
    return path


@pytest.mark.parametrize("problem, template, other", [
    ("gemv.py", "gemv", {"M": 29, "K": 1031}),
    ("linear_softmax.py", "mm_reduce", {"batch_size": 5, "in_features": 50, "out_features": 130}),
], ids=["gemv", "mm_reduce"])
def test_builtin_optimizes_and_the_best_is_a_drop_in(problem, template, other, tmp_path, capsys):
    path = PROBLEMS / problem
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
    assert all(f"{template} template" in reply for reply in replies)
    assert len({json.dumps(parse_config(reply), sort_keys=True) for reply in replies}) == 2
    candidate = tmp_path / "best.py"
    candidate.write_text(best)
    assert main(["eval", str(path), str(candidate), "--device", "cpu", "--no-timing"]) == 0, capsys.readouterr().out
    resized = _resized(path, other, tmp_path / "other_sizes")
    assert main(["eval", str(resized), str(candidate), "--device", "cpu", "--no-timing"]) == 0, capsys.readouterr().out
