"""Batch throughput, local scheduler against Ray, one slot against two: problems per hour.

    python benchmarks/batch_scale.py [--copies 8] [--attempts 4] [--reps 2] [--problem PATH] [--only CONFIGS]
                                     [--gpus-one 0] [--gpus-two 0,1] [--cpu] [--scratch DIR] [--json OUT]

One run measures four configurations of `ratchet batch` side by side: the local scheduler on one
slot and on two (`--gpus 0`, `--gpus 0,1`) and Ray on one and on two (`--ray local`, started with
CUDA_VISIBLE_DEVICES=0 and =0,1 in the driver's environment, since Ray counts the GPUs it sees).
With --cpu the slots are CPU workers instead (`--cpu-workers 1` and `2`, with and without
`--ray local`; SUITE_SCALE=small, Triton's interpreter): a check of the machinery, not a GPU
figure; on the CPU the agent stops at a problem's first correct kernel, whatever --attempts says.

The work: --copies copies of one problem (default suite/01_swish_scale.py) in a temporary suite,
each differing only in a first comment line naming it (the workspace and the evaluator's baseline
cache are keyed by a problem's bytes), so every problem costs the same. The model is the built-in
policy (`--model builtin`, no endpoint) with exactly --attempts attempts per problem
(`--max-attempts`, patience 0, no roofline stop: both targets 0). Every run shares one evaluator cache (RATCHET_CACHE_DIR), filled
first by an unmeasured warm-up run (local scheduler, two slots): torch.compile baselines, compiled
kernels; each measured run gets a fresh workspace and run directory. The configurations are
interleaved within each repetition (local-1, local-2, ray-1, ray-2; then again), so drift hits
them all alike.

Prints per configuration each run's problems per hour (problems / wall seconds of the whole
command, Ray's start included), their mean and spread (max - min, % of the mean), and the
per-problem device_s (median, min, max over its rows) so the cost equality can be checked (on Ray
a slot's first problem costs more than the next: a slot is one actor for the batch, whose process
and warm evaluator workers pass from one problem to the next; the local scheduler starts a fresh
process for each); then the ratios against the targets of issue 17: Ray / local at one slot and
at two (target >= 0.95) and two slots / one for each scheduler (target >= 1.9), each as the ratio
of the means with its range over every pairing of the repetitions (each run of one with each run
of the other). The same again in steady state: problems per hour from the first problem's start
to the last one's end (the batch's own start and exit left out: they weigh on a short benchmark,
not on a batch of hours). And with every slot warm: from the end of the last slot's first problem
(its cold start: process, imports, evaluator workers) to the last problem's end, the problems run
in that window (a batch of hundreds of problems approaches this rate). --warmup picks the
configuration of the warm-up run (ray-2 is quicker on many copies). --json OUT writes all of it. Exit 1 when a run (the warm-up included) exits non-zero, or a problem has no row
or one whose status is not `finished` (`unrecognized`: the built-in policy made no attempt).
Each batch runs in its own process session; whatever it leaves there (a Ray instance) is killed.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from itertools import product
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(ROOT))

from agent.batch.log import RunLog  # noqa: E402
from benchmarks.batch_rows import by_check, faults, not_ok_attempts, warm_rate  # noqa: E402

DEFAULT_PROBLEM = ROOT / "suite" / "01_swish_scale.py"
CONFIG_ORDER = ("local-1", "local-2", "ray-1", "ray-2")
# (name, numerator, denominator, target): ratios of problems per hour
RATIOS = (("ray/local, 1 slot", "ray-1", "local-1", 0.95), ("ray/local, 2 slots", "ray-2", "local-2", 0.95),
          ("2/1 slots, local", "local-2", "local-1", 1.9), ("2/1 slots, ray", "ray-2", "ray-1", 1.9))
SCRUB = ("OPENAI_", "RATCHET_")
STOP_GRACE_S = 30.0  # after SIGTERM (Ctrl-C here), how long a batch may take to stop before SIGKILL


def make_suite(problem: Path, copies: int, suite: Path) -> list[str]:
    """`copies` copies of `problem` in `suite`, each with a first comment line naming it; their names."""
    text = problem.read_text()
    suite.mkdir(parents=True)
    names = []
    for i in range(1, copies + 1):
        name = f"c{i:02d}_{problem.stem}"
        (suite / f"{name}.py").write_text(f"# batch_scale.py: copy {i} of {copies} of {problem.name}\n{text}")
        names.append(name)
    return names


def configurations(args: argparse.Namespace) -> dict[str, dict[str, Any]]:
    """Per configuration: its slot count, the batch flags, and the driver's environment over the base one."""
    if args.cpu:
        return {f"{kind}-{n}": {"slots": n, "flags": [*(["--ray", "local"] if kind == "ray" else []),
                                                      "--cpu-workers", str(n)], "env": {}}
                for kind, n in (("local", 1), ("local", 2), ("ray", 1), ("ray", 2))}
    out = {}
    for n, gpus in ((1, args.gpus_one), (2, args.gpus_two)):
        count = len([g for g in gpus.split(",") if g.strip()])
        out[f"local-{n}"] = {"slots": count, "flags": ["--gpus", gpus], "env": {}}
        out[f"ray-{n}"] = {"slots": count, "flags": ["--ray", "local"], "env": {"CUDA_VISIBLE_DEVICES": gpus}}
    return {name: out[name] for name in CONFIG_ORDER}


def base_env(args: argparse.Namespace, cache: Path) -> dict[str, str]:
    """The caller's environment without model or ratchet settings (nor a Ray address), plus ours."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(SCRUB) and k != "RAY_ADDRESS"}
    env.update(RATCHET_CACHE_DIR=str(cache), RATCHET_PATIENCE="0",
               # no roofline stop: every problem takes exactly --attempts attempts (with the stop at
               # 80% of the floor, or even at 100%, copies of one problem took one attempt or two, by
               # timing noise: a fused kernel can read and write faster than the floor's copy)
               RATCHET_ROOFLINE_TARGET="0", RATCHET_MEMORY_ROOFLINE_TARGET="0",
               RAY_AUTH_MODE="disabled",  # a throwaway local instance; token auth can refuse its driver
               PYTHONPATH=os.pathsep.join([str(ROOT), *filter(None, [env.get("PYTHONPATH")])]))  # this checkout's code
    if args.cpu:
        env.update(SUITE_SCALE="small", RATCHET_TRIALS="2", CUDA_VISIBLE_DEVICES="")
    return env


def session_members(sid: int) -> list[int]:
    """Pids of the processes in session `sid` (a batch started in its own session, and what it left)."""
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if int(fields[3]) == sid:  # after ")": state, ppid, pgrp, session
            pids.append(int(entry.name))
    return pids


def kill_session(sid: int) -> list[int]:
    """SIGKILL what is left of a batch's session (its Ray instance, should one outlive it); the pids."""
    left = session_members(sid)
    for pid in left:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    return left


def one_run(label: str, config: dict[str, Any], suite: Path, names: list[str], args: argparse.Namespace,
            env: dict[str, str], scratch: Path) -> dict[str, Any]:
    """One `ratchet batch` of the suite in a fresh workspace and run directory; its figures."""
    out, workspace, stderr_path = scratch / f"run-{label}", scratch / f"ws-{label}", scratch / f"{label}.stderr"
    command = [sys.executable, "-m", "agent.cli", "batch", str(suite), "--model", "builtin",
               "--max-attempts", str(args.attempts), "--patience", "0", "--out", str(out),
               "--workspace", str(workspace), *config["flags"]]
    run_env = {**env, **config["env"]}
    print(f"[{label}] {' '.join(command[3:])}" + "".join(f" ({k}={v})" for k, v in config["env"].items()),
          file=sys.stderr, flush=True)
    with stderr_path.open("w") as stderr:
        started, launched_at = time.monotonic(), time.time()
        # its own session: whatever it starts (a Ray instance) can be found, and ended, by session id
        proc = subprocess.Popen(command, env=run_env, cwd=scratch, stdout=subprocess.PIPE, stderr=stderr, text=True,
                                start_new_session=True)
        try:
            stdout, _ = proc.communicate()
        except KeyboardInterrupt:
            proc.terminate()  # the batch cancels its problems and exits 130
            try:
                proc.wait(STOP_GRACE_S)
            finally:
                kill_session(proc.pid)
            raise
        seconds = time.monotonic() - started
    leftover = kill_session(proc.pid)
    latest = RunLog(out / "results.jsonl").latest()
    rows = [latest[name] for name in names if name in latest]
    missing = [name for name in names if name not in latest]
    starts = [r["started_at"] for r in rows if r.get("started_at")]
    ends = [r["finished_at"] for r in rows if r.get("finished_at")]
    refused = not_ok_attempts(workspace, suite, names)
    result = {
        "label": label, "config": label.rsplit("#", 1)[0], "command": command[3:], "env": config["env"],
        "exit_code": proc.returncode, "seconds": round(seconds, 2), "problems": len(rows), "missing": missing,
        "correct": sum(bool(r.get("correct")) for r in rows),
        "attempts": sum(r.get("attempts") or 0 for r in rows),
        "problems_per_hour": round(len(rows) / seconds * 3600, 1) if seconds and not missing else None,
        "steady_per_hour": (round(len(rows) / (max(ends) - min(starts)) * 3600, 1)
                            if starts and ends and max(ends) > min(starts) and not missing else None),
        "warm_per_hour": None if missing else warm_rate(rows, config["slots"]),
        # the batch's own overhead: from its launch to its first problem's start (Ray's start included),
        # and from its last problem's end to its exit (rows' wall clocks: this host's, with --ray local)
        "start_s": round(min(starts) - launched_at, 2) if starts else None,
        "end_s": round(launched_at + seconds - max(ends), 2) if ends else None,
        "device_s": {r["problem"]: r.get("device_s") for r in rows},
        "statuses": sorted({str(r.get("status")) for r in rows}),
        "executors": sorted({str(r.get("executor")) for r in rows}),
        "summary": stdout.strip().splitlines()[-1] if stdout.strip() else None, "leftover_pids": leftover,
        "not_ok_attempts": refused, "not_ok": by_check(refused),
    }
    if proc.returncode or missing:
        tail = stderr_path.read_text(errors="replace").strip().splitlines()[-15:]
        print(f"[{label}] exit {proc.returncode}, {len(missing)} problem(s) without a row; stderr's end:\n  "
              + "\n  ".join(tail), file=sys.stderr, flush=True)
    print(f"[{label}] {len(rows)} problems ({result['correct']} correct, {result['attempts']} attempts) in "
          f"{seconds:.1f} s = {result['problems_per_hour']} problems/hour (exit {proc.returncode})"
          + (f"; killed {len(leftover)} leftover process(es)" if leftover else ""), file=sys.stderr, flush=True)
    if result["not_ok"]:
        print(f"[{label}] attempts not ok (every copy is the same honest kernel): "
              + ", ".join(f"{why} {n}" for why, n in sorted(result["not_ok"].items())), file=sys.stderr, flush=True)
        for attempt in refused:
            print(f"  {attempt['problem']} attempt {attempt['attempt']}: {attempt['check']}: {attempt['detail'][:300]}",
                  file=sys.stderr, flush=True)
    return result


METRICS = {"problems_per_hour": "whole command", "steady_per_hour": "steady state",
           "warm_per_hour": "every slot warm"}


def summarize(runs: list[dict[str, Any]], configs: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """Per configuration its rates (each metric), mean, spread and device_s; the ratios with their ranges."""
    per: dict[str, dict[str, Any]] = {}
    for name, config in configs.items():
        mine = [r for r in runs if r["config"] == name]
        device = [s for r in mine for s in r["device_s"].values() if s is not None]
        per[name] = {"slots": config["slots"], "flags": config["flags"], "env": config["env"],
                     "device_s_median": round(statistics.median(device), 2) if device else None,
                     "device_s_min": min(device) if device else None, "device_s_max": max(device) if device else None,
                     "start_s": [r["start_s"] for r in mine], "end_s": [r["end_s"] for r in mine],
                     "seconds": [r["seconds"] for r in mine]}
        for metric in METRICS:
            rates = [r[metric] for r in mine]
            whole = [x for x in rates if x is not None]
            mean = statistics.fmean(whole) if whole and len(whole) == len(rates) else None
            per[name][metric] = {"rates": rates, "mean": round(mean, 1) if mean else None,
                                 "spread_pct": round((max(whole) - min(whole)) / mean * 100, 1) if mean else None}
    ratios: dict[str, dict[str, Any]] = {metric: {} for metric in METRICS}
    for metric in METRICS:
        for label, top, bottom, target in RATIOS:
            if top not in per or bottom not in per:  # --only left one of them out
                continue
            a, b = per[top][metric], per[bottom][metric]
            pairs = [x / y for x, y in product(a["rates"], b["rates"]) if x and y]
            value = a["mean"] / b["mean"] if a["mean"] and b["mean"] else None
            ratios[metric][label] = {"of": [top, bottom], "ratio": round(value, 3) if value else None,
                                     "min": round(min(pairs), 3) if pairs else None,
                                     "max": round(max(pairs), 3) if pairs else None,
                                     "target": target, "meets": bool(value and value >= target)}
    by_copy: dict[str, list[float]] = {}
    for r in runs:
        for problem, seconds in r["device_s"].items():
            if seconds is not None:
                by_copy.setdefault(problem, []).append(seconds)
    copies = {p: round(statistics.median(v), 2) for p, v in sorted(by_copy.items())}
    return {"configurations": per, "ratios": ratios, "device_s_median_by_copy": copies}


def fmt(x: float | None, spec: str = ".1f") -> str:
    return "-" if x is None else format(x, spec)


def print_table(summary: dict[str, Any], reps: int) -> None:
    per = summary["configurations"]
    for metric, what in METRICS.items():
        head = (f"{'problems/hour, ' + what:<42}" + "".join(f"{'run ' + str(i + 1):>9}" for i in range(reps))
                + f"{'mean':>9}{'spread':>8}   device_s/problem: median (min-max)   start s/run")
        print(head)
        print("-" * len(head))
        for name, c in per.items():
            m = c[metric]
            where = " ".join(c["flags"]) + "".join(f" {k}={v}" for k, v in c["env"].items())
            spread = "-" if m["spread_pct"] is None else f"{m['spread_pct']:.1f}%"
            device = (f"{fmt(c['device_s_median'], '.2f')} ({fmt(c['device_s_min'], '.2f')}-"
                      f"{fmt(c['device_s_max'], '.2f')})")
            print(f"{name + ' (' + where + ')':<42}" + "".join(f"{fmt(x):>9}" for x in m["rates"])
                  + f"{fmt(m['mean']):>9}{spread:>8}   {device:<35}" + " ".join(fmt(b) for b in c["start_s"]))
        print("whole command: problems / wall seconds of the whole `ratchet batch` (Ray's start included); steady "
              "state: problems / (last problem's end - first one's start); every slot warm: after each slot's first "
              "problem (warm_rate); start: launch to first problem's start")
        print()
        for label, r in summary["ratios"][metric].items():
            verdict = "meets" if r["meets"] else "misses"
            print(f"{label:<20} {fmt(r['ratio'], '.3f')}x  (range over pairings of repetitions "
                  f"{fmt(r['min'], '.3f')}-{fmt(r['max'], '.3f')})  target >= {r['target']}: {verdict}")
        print()
    print("median device_s per copy over every measured run: "
          + ", ".join(f"{p} {s:.2f}" for p, s in summary["device_s_median_by_copy"].items()))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--copies", type=int, default=8, help="copies of the problem in the suite (default 8)")
    parser.add_argument("--attempts", type=int, default=4, help="attempts per problem (--max-attempts; default 4)")
    parser.add_argument("--reps", type=int, default=2, help="repetitions of the four configurations (default 2)")
    parser.add_argument("--problem", type=Path, default=DEFAULT_PROBLEM,
                        help="the problem file to copy (default suite/01_swish_scale.py); the built-in policy must "
                             "recognize it")
    parser.add_argument("--cpu", action="store_true",
                        help="CPU workers (1 and 2) instead of GPUs: SUITE_SCALE=small, Triton's interpreter")
    parser.add_argument("--gpus-one", default="0", help="the one-slot GPU (default 0)")
    parser.add_argument("--gpus-two", default="0,1", help="the two-slot GPUs (default 0,1; distinct ids, for Ray)")
    parser.add_argument("--only", type=lambda text: [t.strip() for t in text.split(",") if t.strip()],
                        help=f"measure only these configurations (comma-separated, of {', '.join(CONFIG_ORDER)}): "
                             "e.g. ray-1,ray-2 for a longer run of Ray's scaling within one machine call")
    parser.add_argument("--warmup", default="local-2", choices=CONFIG_ORDER,
                        help="the configuration of the unmeasured warm-up run that fills the caches (default local-2; "
                             "ray-2 is quicker on many copies: one process per slot, not per problem)")
    parser.add_argument("--scratch", type=Path,
                        help="keep the suite, caches, workspaces and run directories here (default: a temporary "
                             "directory, removed at the end)")
    parser.add_argument("--json", metavar="OUT", type=Path, help="also write every figure as JSON")
    args = parser.parse_args()
    if args.copies < 1 or args.attempts < 1 or args.reps < 1:
        parser.error("--copies, --attempts and --reps must be at least 1")
    if not args.problem.is_file():
        parser.error(f"--problem {args.problem}: no such file")
    for gpus in (args.gpus_one, args.gpus_two):
        ids = [g.strip() for g in gpus.split(",") if g.strip()]
        if not args.cpu and (not ids or len(set(ids)) != len(ids)):
            parser.error(f"{gpus!r}: name distinct GPU ids (Ray takes them as CUDA_VISIBLE_DEVICES)")
    unknown = [name for name in args.only or [] if name not in CONFIG_ORDER]
    if unknown:
        parser.error(f"--only {', '.join(unknown)}: not a configuration (one of {', '.join(CONFIG_ORDER)})")
    if args.scratch and args.scratch.exists() and any(args.scratch.iterdir()):
        parser.error(f"--scratch {args.scratch}: not empty")

    every = configurations(args)
    configs = {name: c for name, c in every.items() if not args.only or name in args.only}
    # `timeout` and a machine's time limit send SIGTERM: stop the running batch as on Ctrl-C (one_run),
    # not leave it and its Ray instance running on (seen: a batch that outlived its benchmark kept
    # writing into the scratch directory while the next job ran)
    signal.signal(signal.SIGTERM, _interrupt)
    started = time.monotonic()
    scratch = args.scratch.resolve() if args.scratch else Path(tempfile.mkdtemp(prefix="ratchet-batch-scale-"))
    scratch.mkdir(parents=True, exist_ok=True)
    try:
        suite = scratch / "suite"
        names = make_suite(args.problem.resolve(), args.copies, suite)
        env = base_env(args, scratch / "cache")
        warm = every[args.warmup]
        print(f"warm-up (unmeasured): {args.copies} copies of {args.problem.name}, {args.attempts} attempt(s) each",
              file=sys.stderr, flush=True)
        warmup = one_run(f"{args.warmup}#warmup", warm, suite, names, args, env, scratch)
        if faults(warmup):  # every measured run would fail the same way
            print(f"FAILED: {warmup['label']}: {faults(warmup)}; no run measured", file=sys.stderr)
            return 1
        runs = []
        for rep in range(1, args.reps + 1):
            for name in configs:
                runs.append(one_run(f"{name}#{rep}", configs[name], suite, names, args, env, scratch))
                if args.json:  # so far, in case the machine's time runs out before the end
                    write_json(args, {"wall_s": round(time.monotonic() - started, 1), "warmup": warmup, "runs": runs,
                                      "partial": True})
    finally:
        if not args.scratch:
            shutil.rmtree(scratch, ignore_errors=True)
    wall = time.monotonic() - started

    summary = summarize(runs, configs)
    where = "CPU (SUITE_SCALE=small)" if args.cpu else "GPU"
    print(f"\n{args.copies} copies of {args.problem.name}, --model builtin --max-attempts {args.attempts} "
          f"(patience 0), {args.reps} repetition(s), {where}; warm-up {warmup['seconds']} s; "
          f"benchmark wall {wall:.0f} s\n")
    print_table(summary, args.reps)
    failed = {r["label"]: why for r in [warmup, *runs] if (why := faults(r))}
    for label, why in failed.items():
        print(f"FAILED: {label}: {why}")
    if args.json:
        write_json(args, {"wall_s": round(wall, 1), "warmup": warmup, "runs": runs, **summary, "failed": failed})
    return 1 if failed else 0


def _interrupt(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt


def write_json(args: argparse.Namespace, figures: dict[str, Any]) -> None:
    settings = {"problem": str(args.problem), "copies": args.copies, "attempts": args.attempts, "reps": args.reps,
                "cpu": args.cpu, "gpus_one": args.gpus_one, "gpus_two": args.gpus_two}
    args.json.write_text(json.dumps({"settings": settings, **figures}, indent=1) + "\n")


if __name__ == "__main__":
    try:
        sys.exit(main())
    except KeyboardInterrupt:  # Ctrl-C or SIGTERM: the running batch was stopped (one_run); --json has the runs so far
        print("batch_scale: interrupted", file=sys.stderr)
        sys.exit(130)
