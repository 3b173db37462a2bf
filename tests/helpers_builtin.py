"""Shared pieces of the built-in policy's tests: a draft's outputs beside the reference's, the CPU
settings of an end-to-end run, the end-to-end run itself (optimize, then eval of the kept best on
the problem and on a resized copy), and the child process that compiles drafts with Triton's real
compiler (not its interpreter)."""
from __future__ import annotations

import importlib.util
import itertools
import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import torch

ROOT = Path(__file__).resolve().parent.parent
_LOADED = itertools.count()
CLIENT_SETTINGS = ("OPENAI_API_KEY", "OPENAI_BASE_URL", "RATCHET_CONFIG", "RATCHET_MODEL", "RATCHET_BASE_URL",
                   "RATCHET_API_KEY", "RATCHET_WORKSPACE")


def one_input_problem(tmp_path: Path, prefix: str, body: str, forward: str, shape: tuple[int, ...],
                      init: str = "", args: str = "") -> Path:
    """A problem file with one random input of `shape`: Model's __init__ runs `body` (indented
    lines; `args` are its parameters, `init` what get_init_inputs returns) and forward returns
    `forward` of `x`."""
    path = tmp_path / f"{prefix}_problem_{next(_LOADED)}.py"
    path.write_text(f"import torch\nimport torch.nn as nn\nimport torch.nn.functional as F\n\n\n"
                    f"class Model(nn.Module):\n    def __init__(self{args}):\n        super().__init__()\n{body}\n"
                    f"        pass\n\n    def forward(self, x):\n        return {forward}\n\n\n"
                    f"def get_inputs():\n    return [torch.randn{shape!r}]\n\n\n"
                    f"def get_init_inputs():\n    return [{init}]\n")
    return path


def builtin_cpu_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """`ratchet optimize --model builtin` on the CPU: no endpoint or workspace from the caller's
    environment, Triton's interpreter, two correctness trials."""
    for name in CLIENT_SETTINGS:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    monkeypatch.setenv("RATCHET_DEVICE", "cpu")
    monkeypatch.setenv("RATCHET_TRIALS", "2")


def compiled_in_child(test_file: str, workdir: Path, extra_env: dict[str, str] | None = None) -> dict[str, Any]:
    """Run `python test_file workdir` without TRITON_INTERPRET (the compiler, not the interpreter,
    compiles what the file drafts) and return the JSON object its last line of stdout holds."""
    pytest.importorskip("triton")
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env.update(extra_env or {})
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), str(Path(__file__).parent), env.get("PYTHONPATH", "")])
    proc = subprocess.run([sys.executable, test_file, str(workdir)], capture_output=True, text=True, env=env,
                          timeout=280, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def load_module(path: Path) -> Any:
    """Import a problem or candidate file under a name of its own."""
    spec = importlib.util.spec_from_file_location(f"builtin_test_{path.stem}_{next(_LOADED)}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def draft_outputs(problem: Path, source: str, tmp_path: Path) -> tuple[Any, Any]:
    """The reference's and the drafted candidate's outputs on the same inputs and weights (both
    models built after the same seed, as the evaluator builds them)."""
    candidate = tmp_path / f"candidate_{problem.stem}_{next(_LOADED)}.py"
    candidate.write_text(source)
    ref, cand = load_module(problem), load_module(candidate)
    init = ref.get_init_inputs()
    torch.manual_seed(3)
    reference = ref.Model(*init)
    torch.manual_seed(3)
    ours = cand.ModelNew(*init)
    torch.manual_seed(4)
    inputs = ref.get_inputs()
    with torch.no_grad():
        return reference(*inputs), ours(*inputs)


# --- end to end: `ratchet optimize --model builtin`, then `ratchet eval` of the kept best ---------


def optimize_builtin(problem: Path, tmp_path: Path, capsys: pytest.CaptureFixture, attempts: int = 1
                     ) -> tuple[str, list[str]]:
    """Run `ratchet optimize PROBLEM --model builtin` for `attempts` attempts, every one `ok`; the
    kept best's source and the policy's replies (one per attempt, each naming its configuration)."""
    from agent.cli import main
    from agent.workspace.root import Workspace

    code = main(["optimize", str(problem), "--workspace", str(tmp_path / "ws"), "--json", "--model", "builtin",
                 "--max-attempts", str(attempts)])
    out, err = capsys.readouterr()
    assert code == 0, err
    summary = json.loads(out)
    assert summary["model"] == "builtin" and summary["verdicts"] == ["ok"] * attempts, summary
    assert summary["tokens_used"] == 0
    with Workspace(tmp_path / "ws").open_existing(problem) as repo:
        best = repo.best_path.read_text()
        [saved] = repo.trajectories()
    replies = [m.get("content") for m in json.loads(saved.text)["messages"] if m["role"] == "assistant"]
    assert len(replies) == attempts
    return best, replies


def resized(problem: Path, directory: Path, sizes: dict[str, int] | None = None,
            line: tuple[str, str] | None = None) -> Path:
    """A copy of the problem, in `directory`, at other sizes: its module-level `name = 12` lines set
    to `sizes`, and/or one line of sizes (`batch_size, length = 5, 70`) replaced by another."""
    text = problem.read_text()
    for name, value in (sizes or {}).items():
        text, count = re.subn(rf"^{name} = \d+$", f"{name} = {value}", text, flags=re.MULTILINE)
        assert count == 1, name
    if line is not None:
        assert text.count(line[0]) == 1, line[0]
        text = text.replace(*line)
    directory.mkdir(exist_ok=True)
    path = directory / problem.name
    path.write_text(text)
    return path


def evaluates_ok(problem: Path, best: str, tmp_path: Path, capsys: pytest.CaptureFixture, *args: str) -> dict:
    """`ratchet eval PROBLEM best.py ARGS --json` on the kept best: exit 0, verdict ok, and never
    refusing the evaluator's held-out sizes (generalizes True, or None where it finds no size of the
    problem to vary). Returns the record."""
    from agent.cli import main

    candidate = tmp_path / "best.py"
    candidate.write_text(best)
    code = main(["eval", str(problem), str(candidate), *args, "--json"])
    out, err = capsys.readouterr()
    assert code == 0, err or out
    record = json.loads(out)
    assert record["verdict"] == "ok" and record["generalizes"] is not False, record
    return record


def declined(rec: Any) -> str:
    """Why no family drafts a problem, asserting that none does: the families' reason, which the
    fallback family's summary names when it drafts the problem op by op (agent.builtin.fallback),
    or the recognition's reason when nothing is drafted (a forward with no elementwise work: kept eager)."""
    if rec.plan is not None:
        assert rec.plan.kind == "fallback", (rec.plan.kind, rec.plan.summary)
        return rec.plan.summary
    return rec.reason


def assert_draft_matches_at_two_sizes(problem: Path, source: str, tmp_path: Path, other: dict[str, int],
                                      tolerance: float) -> None:
    """The draft `source` computes the reference at the problem's sizes and at `other` (the same draft)."""
    for path in (problem, resized(problem, tmp_path / "other", other)):
        expected, got = draft_outputs(path, source, tmp_path)
        assert got.dtype == expected.dtype and got.shape == expected.shape
        torch.testing.assert_close(got, expected, rtol=tolerance, atol=tolerance)
