"""Batch throughput against the number of GPUs: problems per hour with one GPU and with two.

    python benchmarks/batch_scale.py [--gpus-a 0] [--gpus-b 0,1] [--filter REGEX] [--attempts N]
                                     [--cpu] [--json OUT]

Runs `ratchet batch` twice over the same problems of the bundled suite (suite/), once per GPU
set, each with a fresh workspace and a fresh evaluator cache (so both pay for torch.compile
baselines and device ceilings alike), against the same scripted model: a loopback OpenAI-
compatible server (tests/loopback.py) whose script per problem is a broken submission followed
by the problem's known-correct candidate (tests/suite_candidates/), so every problem costs the
same evaluator work in both runs. Prints wall seconds, problems per hour and the ratio b / a
(ideal: the ratio of GPU counts). With --cpu it compares --cpu-workers 1 against 2 instead
(small shapes, Triton's interpreter: a check of the machinery, not a GPU figure).
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(ROOT / "tests"))

from helpers_batch import SUITE, SuiteLoopback, candidate  # noqa: E402
from loopback import submit  # noqa: E402

BROKEN = "import torch\n\nclass ModelNew(torch.nn.Module):\n    def forward(self, *args):\n        return no_such_name\n"


def scripts(names: list[str], attempts: int) -> dict:
    """Per problem: one broken submission, then the known-correct candidate until the budget ends."""
    return {name: [submit(BROKEN)] + [submit(candidate(name))] * attempts for name in names}


def one_run(label: str, workers: list[str], names: list[str], args: argparse.Namespace, scratch: Path) -> dict:
    out = scratch / f"run-{label}"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "RATCHET_"))}
    env["RATCHET_CACHE_DIR"] = str(scratch / f"cache-{label}")
    env["RATCHET_PATIENCE"] = "0"
    if args.cpu:
        env["SUITE_SCALE"] = "small"
        env["RATCHET_TRIALS"] = "2"
    pattern = "^(" + "|".join(names) + ")$"
    with SuiteLoopback(scripts(names, args.attempts), lifetime_s=24 * 3600) as server:
        command = [sys.executable, "-m", "agent.cli", "batch", str(SUITE), "--filter", pattern, "--model", "scripted",
                   "--base-url", server.url, "--max-attempts", str(args.attempts), "--out", str(out),
                   "--workspace", str(scratch / f"ws-{label}"), *workers]
        started = time.monotonic()
        proc = subprocess.run(command, env=env, cwd=scratch, stdout=subprocess.PIPE, text=True)
        seconds = time.monotonic() - started
    rows = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines() if line.strip()]
    return {"label": label, "workers": " ".join(workers), "exit_code": proc.returncode, "problems": len(rows),
            "correct": sum(bool(r.get("correct")) for r in rows), "seconds": round(seconds, 1),
            "problems_per_hour": round(len(rows) / seconds * 3600, 1) if seconds else None}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gpus-a", default="0", help="the first run's GPUs (default 0)")
    parser.add_argument("--gpus-b", default="0,1", help="the second run's GPUs (default 0,1)")
    parser.add_argument("--filter", default=None, help="regex over suite problem names (default: all)")
    parser.add_argument("--attempts", type=int, default=3, help="attempt budget per problem (default 3)")
    parser.add_argument("--cpu", action="store_true", help="compare 1 and 2 CPU workers instead (small shapes)")
    parser.add_argument("--json", metavar="OUT", help="also write the figures as JSON")
    args = parser.parse_args()

    import re

    names = sorted(p.stem for p in SUITE.glob("[0-9]*.py") if not args.filter or re.search(args.filter, p.stem))
    if args.cpu:
        configs = [("a", ["--cpu-workers", "1"]), ("b", ["--cpu-workers", "2"])]
    else:
        configs = [("a", ["--gpus", args.gpus_a]), ("b", ["--gpus", args.gpus_b])]
    with tempfile.TemporaryDirectory(prefix="ratchet-batch-scale-") as tmp:
        results = [one_run(label, workers, names, args, Path(tmp)) for label, workers in configs]
    a, b = results
    ratio = b["problems_per_hour"] / a["problems_per_hour"] if a["problems_per_hour"] and b["problems_per_hour"] else None
    for r in results:
        print(f"{r['workers']:>16}: {r['problems']} problems ({r['correct']} correct) in {r['seconds']} s = "
              f"{r['problems_per_hour']} problems/hour (exit {r['exit_code']})")
    print(f"throughput ratio ({b['workers']}) / ({a['workers']}): {ratio:.2f}x" if ratio else "throughput ratio: n/a")
    if args.json:
        Path(args.json).write_text(json.dumps({"runs": results, "ratio": ratio}, indent=1) + "\n")
    return 0 if all(r["exit_code"] == 0 for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
