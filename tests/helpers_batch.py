"""Shared pieces of the batch tests: a loopback model server that keeps one script per problem,
so problems running at the same time in different workers each get their own replies
(tests/loopback.py's server replays one script in arrival order)."""
from __future__ import annotations

import json
import re
from pathlib import Path

from agent.batch.log import RunLog
from loopback import Loopback, Request, Step

SUITE = Path(__file__).resolve().parents[1] / "suite"
SUITE_CANDIDATES = Path(__file__).resolve().parent / "suite_candidates"


def candidate(name: str) -> str:
    return (SUITE_CANDIDATES / f"{name}.py").read_text()


class SuiteLoopback(Loopback):
    """Routes each request by the problem file its task message names (`from NAME.py`)."""

    def __init__(self, scripts: dict[str, list[Step]], **kwargs):
        super().__init__([], **kwargs)
        self.scripts = {name: list(steps) for name, steps in scripts.items()}
        self.positions = dict.fromkeys(scripts, 0)
        self.by_problem: dict[str, list[Request]] = {name: [] for name in scripts}

    def problem_of(self, request: Request) -> str | None:
        for message in request.messages:
            content = message.get("content")
            if message.get("role") == "user" and isinstance(content, str):
                found = re.search(r"from `([^`]+)\.py`", content)
                if found:
                    return found.group(1)
        return None

    def _next_step(self, request: Request) -> tuple[int, Step | None]:
        with self._lock:
            self.requests.append(request)
            number = len(self.requests)
            name = self.problem_of(request)
            if name not in self.scripts:
                return number, None
            self.by_problem[name].append(request)
            position = self.positions[name]
            if position >= len(self.scripts[name]):
                return number, None
            self.positions[name] = position + 1
            return number, self.scripts[name][position]


def quiet_batch_env(monkeypatch, *also_unset: str) -> None:
    """A batch test's environment: no endpoint, key, config or GPU from the caller's shell, the
    bundled suite at its small scale in Triton's interpreter, two trials, fast model retries."""
    for name in ("OPENAI_API_KEY", "OPENAI_BASE_URL", "RATCHET_CONFIG", "RATCHET_MODEL", "RATCHET_BASE_URL",
                 "RATCHET_WORKSPACE", "CUDA_VISIBLE_DEVICES", *also_unset):
        monkeypatch.delenv(name, raising=False)
    for name, value in (("SUITE_SCALE", "small"), ("TRITON_INTERPRET", "1"), ("RATCHET_TRIALS", "2"),
                        ("RATCHET_RETRY_ATTEMPTS", "3"), ("RATCHET_RETRY_BASE_S", "0.01"),
                        ("RATCHET_RETRY_MAX_S", "0.05")):
        monkeypatch.setenv(name, value)


# result rows and run directories written by hand (tests/batch/test_report.py, tests/loop/test_kept_eager.py)
def row(name: str, *, correct: bool = True, measured: bool = True, eager: float | None = None,
        compile: float | None = None, roofline: float | None = None, verdict: str | None = None, **extra) -> dict:
    data = {"schema": 1, "problem": name, "status": "finished", "verdict": verdict or ("ok" if correct else "incorrect"),
            "correct": correct, "timing_measured": measured and correct, "speedup_vs_eager": eager,
            "speedup_vs_compile": compile, "roofline_fraction": roofline, "attempts": 4, "tokens": 1000,
            "device_s": 60.0, "device": "cuda:0", "eager_ms": None, "compile_ms": None, "floor_ms": None,
            "candidate_ms": None}
    data.update(extra)
    return data


def write_run(tmp_path: Path, rows: list[dict], problems: list[str] | None = None, device: str = "cuda") -> Path:
    run = tmp_path / "run"
    run.mkdir()
    log = RunLog(run / "results.jsonl")
    for r in rows:
        log.append(r)
    meta = {"batch": 1, "suite": "/x/suite", "problems": problems or [r["problem"] for r in rows],
            "settings": {"model": "m"}, "device": device}
    (run / "run.json").write_text(json.dumps(meta))
    return run
