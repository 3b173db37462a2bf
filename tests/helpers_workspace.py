"""Helpers for tests/workspace/test_workspace.py, and the writer it runs as a subprocess.

As a program: commit attempts to one problem's workspace, printing `<attempt> <sha> <became_best>`
after each (flushed), so a test can kill it between or in the middle of commits:

    python tests/helpers_workspace.py ROOT PROBLEM [--count N] [--seed S] [--kind random|ok]

--count 0 commits forever. RATCHET_WORKSPACE_CRASH_AT=<step> makes the library SIGKILL itself
at that step of the first commit that reaches it.
"""
from __future__ import annotations

import argparse
import os
import random
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))
if __name__ == "__main__" and "tools" not in sys.modules:
    # The writer needs tools.record only; tools/__init__ imports the whole evaluator (and torch,
    # about 2 s a process). Give the package an empty namespace so record.py loads on its own.
    import types

    _tools = types.ModuleType("tools")
    _tools.__path__ = [str(ROOT / "tools")]
    sys.modules["tools"] = _tools

from tools.record import Result, Roofline, TimeStats, Verdict  # noqa: E402

PROBLEM_TEXT = '''import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, x):
        return torch.relu(x) * {scale}


def get_inputs():
    return [torch.randn(1024)]


def get_init_inputs():
    return []
'''


def write_problem(path: Path, scale: int = 2) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(PROBLEM_TEXT.format(scale=scale))
    return path


def timed(verdict: Verdict, median: float, low: float | None = None, high: float | None = None, **kw) -> Result:
    """A result whose candidate was timed: median with a 95% interval (default +-2%)."""
    low = median * 0.98 if low is None else low
    high = median * 1.02 if high is None else high
    result = Result(verdict=verdict, message=f"{verdict.value}: timed at {median} ms", **kw)
    result.candidate_time = TimeStats(measured=True, median_ms=median, ci_low_ms=low, ci_high_ms=high, samples=30, note="")
    if verdict is Verdict.OK:
        result.speedup_vs_eager = round(1.0 / median, 6)
        result.speedup_vs_compile = round(0.7 / median, 6)
        result.roofline = Roofline(measured=True, floor_ms=0.05, achieved_fraction=round(0.05 / median, 6), note="")
    return result


def untimed(verdict: Verdict = Verdict.OK) -> Result:
    """A result from a machine that could not time (CPU): candidate_time.measured is False."""
    return Result(verdict=verdict, message=f"{verdict.value}: correctness only, no timing on this machine")


def make_result(rng: random.Random, kind: str = "random") -> Result:
    kind = rng.choice(["ok", "ok", "untimed", "incorrect", "compile_error", "rejected"]) if kind == "random" else kind
    if kind == "untimed":
        return untimed()
    if kind in ("compile_error", "rejected"):
        return Result(verdict=Verdict(kind), message=f"{kind}: line 3: something is wrong\ndetail")
    median = rng.uniform(0.1, 2.0)
    return timed(Verdict.OK if kind == "ok" else Verdict.INCORRECT, median)


def git(repo: Path, *args: str, check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True, check=check)


def writer_command(root: Path, problem: Path, *, count: int, seed: int, kind: str = "random") -> list[str]:
    return [sys.executable, str(Path(__file__).resolve()), str(root), str(problem),
            "--count", str(count), "--seed", str(seed), "--kind", kind]


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("root")
    parser.add_argument("problem")
    parser.add_argument("--count", type=int, default=1)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--kind", default="random")
    args = parser.parse_args()
    from agent.workspace.root import Workspace

    rng = random.Random(args.seed)
    with Workspace(args.root).open_problem(Path(args.problem)) as repo:
        i = 0
        while args.count == 0 or i < args.count:
            i += 1
            source = f"# writer {os.getpid()} seed {args.seed} attempt {i}\nclass ModelNew:\n    pass\n"
            trajectory = f'{{"writer": {os.getpid()}, "step": {i}}}\n'
            att = repo.commit_attempt(source, make_result(rng, args.kind), model="scripted", run_id=f"seed-{args.seed}",
                                      trajectory=trajectory)
            print(att.number, att.sha, "yes" if att.became_best else "no", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
