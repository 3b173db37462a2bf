"""`ratchet optimize --model builtin` end to end on the CPU: the real CLI, graph, evaluator (Triton
in its interpreter) and git workspace, driven by the built-in offline policy (no endpoint)."""
from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from agent.builtin.policy import parse_config
from agent.cli import main
from agent.workspace.root import Workspace
from helpers_builtin import builtin_cpu_env

HERE = Path(__file__).parents[1]
PROBLEMS = HERE / "builtin_problems"
EXAMPLE = HERE.parent / "examples" / "swish_problem.py"
pytestmark = pytest.mark.timeout(240)


@pytest.fixture(autouse=True)
def cpu_settings(monkeypatch):
    builtin_cpu_env(monkeypatch)


def optimize(problem: Path, workspace: Path, capsys, *extra: str) -> tuple[int, dict | None, str]:
    code = main(["optimize", str(problem), "--workspace", str(workspace), "--json", *extra])
    out, err = capsys.readouterr()
    return code, (json.loads(out) if out.strip() else None), err


def workspace_files(problem: Path, workspace: Path) -> tuple[list, str, dict]:
    with Workspace(workspace).open_existing(problem) as repo:
        attempts = repo.attempts()
        best = repo.best_path.read_text()
        [saved] = repo.trajectories()  # one run
        trajectory = json.loads(saved.text)
    return attempts, best, trajectory


@pytest.mark.parametrize("problem, attempts", [
    (EXAMPLE, 1),                                      # elementwise
    (HERE / "problems" / "row_softmax.py", 1),          # softmax (a single-op problem)
    (PROBLEMS / "layernorm.py", 1),                     # layer norm with its affine parameters
    (PROBLEMS / "mid_mean.py", 1),                      # a reduction over a middle dim + ReLU
    (PROBLEMS / "linear_gelu.py", 2),                   # nn.Linear + bias + GELU + scale, two configs
], ids=["elementwise", "softmax", "layernorm", "reduction", "linear_epilogue"])
def test_builtin_finds_a_correct_kernel(problem, attempts, tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("RATCHET_STOP_UNTIMED", "0")  # walk on past the first correct kernel, as on a GPU
    code, summary, err = optimize(problem, tmp_path, capsys, "--model", "builtin", "--max-attempts", str(attempts))
    assert code == 0, err
    assert summary["model"] == "builtin" and summary["verdicts"] == ["ok"] * attempts
    assert summary["tokens_used"] == 0 and summary["format_errors"] == 0
    assert summary["cost_usd"] == 0.0 and summary["price"] is None  # no model, no tokens: $0, honestly
    committed, best, trajectory = workspace_files(problem, tmp_path)
    assert [a.verdict.value for a in committed] == ["ok"] * attempts
    assert all(a.tokens == 0 and a.cost_usd == 0.0 and a.cost_cell() == "$0" for a in committed)
    assert "@triton.jit" in best and "class ModelNew" in best
    configs = [parse_config(m.get("content")) for m in trajectory["messages"] if m["role"] == "assistant"]
    assert len(configs) == attempts and len({json.dumps(c, sort_keys=True) for c in configs}) == attempts


def test_quick_start_with_an_openai_key_exported(tmp_path, capsys, monkeypatch):
    """README's two commands on a machine where OPENAI_API_KEY is exported (most ML engineers'): no
    model is named, so the built-in policy runs and one line says the key is ignored. On the CPU
    nothing is timed, so the first correct kernel ends the run, and one line says why."""
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    code, summary, err = optimize(EXAMPLE, tmp_path, capsys)  # ratchet optimize examples/swish_problem.py
    assert code == 0, err
    assert summary["model"] == "builtin" and summary["verdicts"] == ["ok"] and summary["best"]["attempt"] == 1
    assert "no model named (--model/RATCHET_MODEL): using the built-in policy; OPENAI_API_KEY is ignored" in err
    reason = "timing is unavailable on cpu: stopping at the first correct kernel; run on a GPU to optimize for speed"
    assert summary["stop_reason"] == reason and reason in err.splitlines()
    assert "no improvement" not in err
    # ratchet eval examples/swish_problem.py examples/swish_candidate.py
    assert main(["eval", str(EXAMPLE), str(EXAMPLE.with_name("swish_candidate.py"))]) == 0, capsys.readouterr().err


def test_builtin_is_the_default_with_no_endpoint(tmp_path, capsys):
    code, summary, err = optimize(EXAMPLE, tmp_path, capsys, "--max-attempts", "1")
    assert code == 0, err
    assert summary["model"] == "builtin" and summary["best"]["attempt"] == 1
    assert "with builtin" in err


def test_unrecognized_problem_is_one_line_and_no_attempt(tmp_path, capsys):
    code, summary, err = optimize(PROBLEMS / "sort_rows.py", tmp_path, capsys, "--model", "builtin")
    assert code == 12 and summary is None
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "kept eager" in lines[0] and "aten.sort" in lines[0]  # library ops only
    assert not any(tmp_path.iterdir())  # no workspace, no attempt


def test_builtin_runs_a_batch_and_skips_what_it_does_not_recognize(tmp_path, capsys, monkeypatch):
    """`ratchet batch --model builtin`: each problem gets its own policy; a problem it recognizes
    nothing in ends at once as "unrecognized" with no attempt and no workspace."""
    monkeypatch.delenv("RATCHET_DEVICE")
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    out, ws = tmp_path / "run", tmp_path / "ws"
    code = main(["batch", str(PROBLEMS), "--filter", "^(rmsnorm|sort_rows)$", "--model", "builtin", "--cpu-workers", "1",
                 "--max-attempts", "1", "--out", str(out), "--workspace", str(ws)])
    _, err = capsys.readouterr()
    assert code == 0, err
    rows = {r["problem"]: r for r in map(json.loads, (out / "results.jsonl").read_text().splitlines())}
    assert sorted(rows) == ["rmsnorm", "sort_rows"]
    assert rows["rmsnorm"]["status"] == "finished" and rows["rmsnorm"]["correct"] and rows["rmsnorm"]["model"] == "builtin", \
        (rows["rmsnorm"], (out / "logs" / "rmsnorm.log").read_text()[-3000:] if (out / "logs" / "rmsnorm.log").exists() else "")
    unrecognized = rows["sort_rows"]  # a sort alone: no work for a kernel of its own, the reference is kept
    assert unrecognized["status"] == "kept_eager" and unrecognized["attempts"] == 0 and not unrecognized["correct"]
    assert "kept eager" in unrecognized["error"] and "aten.sort" in unrecognized["error"]
    assert not (ws / "sort_rows").exists()
    assert main(["report", str(out), "--no-html"]) == 0
    report = capsys.readouterr().out
    assert "kept_eager" in report


def test_a_cpu_batch_of_the_bundled_suite_runs_it_small(tmp_path, capsys, monkeypatch):
    """On a CPU the bundled suite's GPU sizes would time out on every attempt: the batch runs it at
    SUITE_SCALE=small, says so in one line, and records the scale in the run's metadata."""
    monkeypatch.setenv("SUITE_SCALE", "unset")
    monkeypatch.delenv("SUITE_SCALE")
    monkeypatch.delenv("RATCHET_DEVICE")
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    out, ws = tmp_path / "run", tmp_path / "ws"
    code = main(["batch", str(HERE.parent / "suite"), "--filter", "^01_swish_scale$", "--model", "builtin",
                 "--cpu-workers", "1", "--max-attempts", "1", "--out", str(out), "--workspace", str(ws)])
    _, err = capsys.readouterr()
    assert code == 0, err
    assert [line for line in err.splitlines() if "SUITE_SCALE" in line] == [
        f"batch: no GPU: running {HERE.parent / 'suite'} at SUITE_SCALE=small (its default sizes are meant for a GPU "
        "and time out in Triton's interpreter; set SUITE_SCALE to choose: any other value keeps the full sizes)"]
    row = json.loads((out / "results.jsonl").read_text().splitlines()[-1])
    assert row["status"] == "finished" and row["correct"] and row["attempts"] == 1, row
    assert json.loads((out / "run.json").read_text())["sessions"][0]["suite_scale"] == "small"
    assert "SUITE_SCALE" not in os.environ  # the workers got it; this process is unchanged
