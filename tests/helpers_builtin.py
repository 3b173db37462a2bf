"""Shared pieces of the built-in policy's tests: a draft's outputs beside the reference's, the CPU
settings of an end-to-end run, and the child process that compiles drafts with Triton's real
compiler (not its interpreter)."""
from __future__ import annotations

import importlib.util
import itertools
import json
import os
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
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")])
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
