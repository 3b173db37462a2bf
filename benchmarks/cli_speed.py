"""How fast does the command line answer `--help`, `--version` and usage errors?

    python benchmarks/cli_speed.py [--runs 5] [--json OUT]

Each command runs as a fresh process (`python -m agent.cli ...`, as the `ratchet` script runs
it) --runs times; the script prints the median wall time of each beside the median of
`python -c "import torch"` measured the same way in the same session, and the ratio of the two.
Before the command line stopped importing heavy modules for these answers, every one of them
paid at least torch's import (ratio >= 1); now none should (tests/cli/test_cli_fast.py checks what is
imported; this script only reports times). `python -c pass` is printed too: the floor a
Python process costs.
"""
from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = "examples/swish_problem.py"
CANDIDATE = "examples/swish_candidate.py"

CLI = [sys.executable, "-m", "agent.cli"]
BASELINES = {
    "python -c 'import torch'": [sys.executable, "-c", "import torch"],
    "python -c pass": [sys.executable, "-c", "pass"],
}
COMMANDS = {  # label -> arguments of `ratchet`
    "ratchet --help": ["--help"],
    "ratchet --version": ["--version"],
    "ratchet eval --help": ["eval", "--help"],
    "ratchet optimize --help": ["optimize", "--help"],
    "ratchet batch --help": ["batch", "--help"],
    "ratchet suite check --help": ["suite", "check", "--help"],
    "eval: unknown option": ["eval", EXAMPLE, CANDIDATE, "--bogus"],
    "eval: missing candidate": ["eval", EXAMPLE, "no_such_candidate.py"],
    "eval: --device tpu": ["eval", EXAMPLE, CANDIDATE, "--device", "tpu"],
    "optimize: missing module": ["optimize", "no_such_problem.py"],
    "report: not a run": ["report", EXAMPLE],
}


def wall_seconds(argv: list[str]) -> float:
    start = time.perf_counter()
    subprocess.run(argv, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False)
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5, help="processes per command (default 5); the median is kept")
    parser.add_argument("--json", metavar="OUT", help="also write the medians as JSON")
    args = parser.parse_args()

    wall_seconds(BASELINES["python -c 'import torch'"])  # warm the file cache once, for everyone
    cases = {**BASELINES, **{label: [*CLI, *argv] for label, argv in COMMANDS.items()}}
    samples: dict[str, list[float]] = {label: [] for label in cases}
    for _ in range(args.runs):  # interleaved, so a slow moment of the machine hits every command alike
        for label, argv in cases.items():
            samples[label].append(wall_seconds(argv))
    medians = {label: statistics.median(times) for label, times in samples.items()}
    torch_s = medians["python -c 'import torch'"]
    width = max(map(len, medians))
    print(f"{'command':<{width}}  median s  / import torch")
    for label, seconds in medians.items():
        print(f"{label:<{width}}  {seconds:8.3f}  {seconds / torch_s:12.2f}x")
    if args.json:
        Path(args.json).write_text(json.dumps({"runs": args.runs, "python": sys.version.split()[0],
                                               "median_s": medians, "import_torch_s": torch_s}, indent=1) + "\n")


if __name__ == "__main__":
    main()
