"""How long a worker takes to be ready after it is asked for: forked from a zygote against started
by exec (RATCHET_WORKER_START=exec, the way before the zygote), side by side in one run; and a cold
`ratchet eval` of the swish example against `python -c "import torch"`.

    python benchmarks/worker_start.py [--device cpu|cuda:0] [--workers 5] [--cold 2] [--json OUT]

For each start mode, in a fresh process: one Spawner (the device's, the default sandbox), then
--workers candidate workers one after another, each from spawn() to its ready answer, and one
reference worker. The first candidate of the fork mode waits for its zygote too (started when the
spawner is made, as an evaluator does); it is printed apart, and the steady figure is the median
of the others. Then --cold runs of `python -m agent.cli eval examples/swish_problem.py
examples/swish_candidate.py` in each mode and of `python -c "import torch"`, alternating, medians
printed with their ratios (issue 34's targets: a candidate worker ready within 1.0 s of being
asked on an H100, 1.5 s on the CPU; a cold eval of the swish example within 3x torch's import
on the CPU).
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MODES = ("fork", "exec")
PROBE = r"""
import json, sys, time
t0 = time.monotonic()
from tools.options import EvalOptions, resolved
from tools.processes.spawner import Spawner
sp = Spawner(resolved(EvalOptions(device=sys.argv[1])))
out = {"candidate": [], "reference": None, "spawner_s": time.monotonic() - t0}
for i in range(int(sys.argv[2])):
    t = time.monotonic()
    w = sp.spawn("candidate")
    w.wait_ready(600)
    out["candidate"].append(time.monotonic() - t)
    w.close()
t = time.monotonic()
w = sp.spawn("reference")
w.wait_ready(600)
out["reference"] = time.monotonic() - t
w.close()
sp.close()
print(json.dumps(out))
"""


def _env(mode: str) -> dict[str, str]:
    env = {**os.environ, "RATCHET_WORKER_START": mode}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    return env


def workers(mode: str, device: str, count: int) -> dict:
    done = subprocess.run([sys.executable, "-c", PROBE, device, str(count)], env=_env(mode), cwd=ROOT,
                          capture_output=True, text=True, timeout=1800)
    if done.returncode != 0:
        raise SystemExit(f"worker_start: the {mode} probe failed:\n{done.stderr[-2000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def timed(argv: list[str], env: dict[str, str]) -> float:
    start = time.monotonic()
    done = subprocess.run(argv, env=env, cwd=ROOT, capture_output=True, text=True, timeout=1800)
    took = time.monotonic() - start
    if done.returncode != 0:
        raise SystemExit(f"worker_start: {' '.join(argv[1:4])} failed ({done.returncode}):\n{done.stderr[-2000:]}")
    return took


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda:0" if _has_cuda() else "cpu")
    parser.add_argument("--workers", type=int, default=5)
    parser.add_argument("--cold", type=int, default=2)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    report: dict = {"device": args.device, "workers": {}, "cold": {}}
    for mode in MODES:
        found = workers(mode, args.device, args.workers)
        first, rest = found["candidate"][0], found["candidate"][1:] or found["candidate"]
        report["workers"][mode] = {"first": first, "median": statistics.median(rest), "all": found["candidate"],
                                   "reference": found["reference"]}
        print(f"{mode:5s} candidate worker: first {first:.2f} s (zygote start included for fork), then median "
              f"{statistics.median(rest):.3f} s over {len(rest)}; reference worker {found['reference']:.2f} s", flush=True)
    fork, exe = report["workers"]["fork"], report["workers"]["exec"]
    print(f"ready after asked, fork / exec: {fork['median'] / exe['median']:.3f}x "
          f"({fork['median']:.3f} s against {exe['median']:.3f} s)")
    if args.cold:
        eval_argv = [sys.executable, "-m", "agent.cli", "eval", "examples/swish_problem.py",
                     "examples/swish_candidate.py", "--device", args.device]
        runs: dict[str, list[float]] = {"import torch": [], "eval fork": [], "eval exec": []}
        for _ in range(args.cold):
            runs["import torch"].append(timed([sys.executable, "-c", "import torch"], _env("fork")))
            for mode in MODES:
                runs[f"eval {mode}"].append(timed(eval_argv, _env(mode)))
        medians = {k: statistics.median(v) for k, v in runs.items()}
        report["cold"] = {"runs": runs, "medians": medians}
        for name, value in medians.items():
            print(f"cold {name:12s}: {value:.2f} s  ({', '.join(f'{x:.2f}' for x in runs[name])})")
        print(f"cold eval / import torch: fork {medians['eval fork'] / medians['import torch']:.2f}x, "
              f"exec {medians['eval exec'] / medians['import torch']:.2f}x; fork / exec "
              f"{medians['eval fork'] / medians['eval exec']:.3f}x")
    if args.json:
        args.json.write_text(json.dumps(report, indent=1))


def _has_cuda() -> bool:
    import torch

    return torch.cuda.is_available()


if __name__ == "__main__":
    main()
