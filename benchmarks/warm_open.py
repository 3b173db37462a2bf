"""Seconds from one problem to the next: opening an evaluator fresh against opening it from a warm
pool (tools/processes/warm.py), as a batch slot does problem after problem.

    python benchmarks/warm_open.py [--problems N] [--cpu] [--json OUT]

For each of N problems (copies of examples/swish_problem.py, each its own file) it opens an
Evaluator, evaluates the honest candidate once (so the candidate worker's start counts too) and
closes it; first every problem with fresh evaluators, then every problem through one warm pool,
then fresh again (so drift shows). It prints seconds per problem (open, evaluate, close) for each
pass, their medians, and the ratio fresh / warm over problems 2..N (the first problem of the warm
pass pays for the pool's own start). On the CPU (--cpu, or without a GPU) kernels run in Triton's
interpreter and nothing is timed: a check of the machinery; the figure that matters is a GPU's.
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(ROOT))


def one_pass(problems: list[Path], candidate: str, options, pool=None) -> list[dict[str, float]]:
    from tools import Evaluator

    rows = []
    for problem in problems:
        t0 = time.perf_counter()
        ev = Evaluator(problem, options, pool=pool)
        opened = time.perf_counter()
        result = ev.evaluate(candidate)
        evaluated = time.perf_counter()
        ev.close()
        closed = time.perf_counter()
        if result.verdict.value != "ok":
            raise SystemExit(f"{problem.name}: the honest candidate was not accepted: {result.message}")
        rows.append({"open_s": opened - t0, "evaluate_s": evaluated - opened, "close_s": closed - evaluated,
                     "total_s": closed - t0, "start_s": result.phases.get("start", 0.0)})
        print(f"  {'warm' if pool else 'fresh'} {problem.name}: open {rows[-1]['open_s']:.2f} s, evaluate "
              f"{rows[-1]['evaluate_s']:.2f} s, close {rows[-1]['close_s']:.2f} s", file=sys.stderr, flush=True)
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--problems", type=int, default=5)
    parser.add_argument("--cpu", action="store_true", help="run on the CPU (Triton's interpreter)")
    parser.add_argument("--json", metavar="OUT")
    args = parser.parse_args()

    import torch

    from tools import EvalOptions
    from tools.processes.warm import WarmPool

    cpu = args.cpu or not torch.cuda.is_available()
    device = "cpu" if cpu else "cuda:0"
    candidate = (ROOT / "examples/swish_candidate.py").read_text()
    text = (ROOT / "examples/swish_problem.py").read_text()
    with tempfile.TemporaryDirectory(prefix="ratchet-warm-open-") as tmp:
        problems = []
        for i in range(args.problems):
            path = Path(tmp) / f"swish_{i}.py"
            path.write_text(f"# copy {i}\n{text}")
            problems.append(path)
        options = EvalOptions(device=device, timing=not cpu, cache_dir=Path(tmp) / "cache")
        one_pass(problems[:1], candidate, options)  # caches (compiled kernels, baselines) filled first
        passes = {"fresh-1": one_pass(problems, candidate, options)}
        with WarmPool(options) as pool:
            passes["warm"] = one_pass(problems, candidate, options, pool)
            taken = dict(pool.taken)
        passes["fresh-2"] = one_pass(problems, candidate, options)
    print(f"device {device}; {args.problems} problems; seconds per problem (open / evaluate / close = total)")
    medians = {}
    for name, rows in passes.items():
        later = rows[1:] or rows
        medians[name] = {k: statistics.median(r[k] for r in later) for k in rows[0]}
        cells = "  ".join(f"{r['open_s']:.2f}/{r['evaluate_s']:.2f}/{r['close_s']:.2f}={r['total_s']:.2f}" for r in rows)
        m = medians[name]
        print(f"{name:>8}: {cells}  | median of 2..N: open {m['open_s']:.2f}, worker start {m['start_s']:.2f}, "
              f"total {m['total_s']:.2f}")
    fresh = statistics.mean([medians["fresh-1"]["total_s"], medians["fresh-2"]["total_s"]])
    print(f"workers taken from the pool: {taken}")
    print(f"per problem, fresh / warm: {fresh / medians['warm']['total_s']:.2f}x "
          f"(fresh {fresh:.2f} s, warm {medians['warm']['total_s']:.2f} s; opening: "
          f"{statistics.mean([medians['fresh-1']['open_s'], medians['fresh-2']['open_s']]):.2f} s against "
          f"{medians['warm']['open_s']:.2f} s)")
    if args.json:
        Path(args.json).write_text(json.dumps({"device": device, "passes": passes, "medians": medians,
                                               "taken": taken}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
