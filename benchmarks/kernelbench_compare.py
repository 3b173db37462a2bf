"""KernelBench's own harness against ratchet, side by side (issue 34): seconds per evaluation of
the same honest Triton candidate (benchmarks/kernelbench/, our own code) for KernelBench
problems, one card for each side, in the same run.

    # card 0: KernelBench's eval_kernel_against_ref (5 correctness trials, 100 timed), a fresh
    # process per problem
    CUDA_VISIBLE_DEVICES=0 python benchmarks/kernelbench_compare.py harness --kb KB --out OUT
    # card 1: `ratchet eval` cold (a new process each, --cold runs in a row sharing one fresh
    # cache dir), then one warm Evaluator doing --evals evaluations
    CUDA_VISIBLE_DEVICES=1 python benchmarks/kernelbench_compare.py ratchet --kb KB --out OUT
    # the table and the ratios the issue's targets name
    python benchmarks/kernelbench_compare.py report --out OUT

KB is a checkout of ScalingIntelligence/KernelBench (its KernelBench/ problems and src/), kept
outside the repository: none of its files are copied here. Each side appends one JSON line per
measurement to OUT/harness.jsonl or OUT/ratchet.jsonl as it goes, so a run cut short still
reports what finished. The harness is imported as KernelBench ships it (`kernelbench.eval`, with
its package's imports); when that fails, the missing module is recorded and nothing is stubbed.

Seconds: `harness` is the eval_kernel_against_ref call in a process that has imported everything;
`harness incl. import` is that process's whole life (interpreter, torch, kernelbench, CUDA, the
call); `cold` is the whole `python -m agent.cli eval` process; `warm` is one Evaluator.evaluate
call once the evaluator is open (its opening is reported apart as `setup`).
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess  # noqa: F401 - Popen through run()
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
# name: (problem file below KB/KernelBench, our candidate, multi-GB)
PROBLEMS = {
    "L1_23_Softmax": ("level1/23_Softmax.py", HERE / "kernelbench/softmax.py", True),
    "L1_40_LayerNorm": ("level1/40_LayerNorm.py", HERE / "kernelbench/layernorm.py", False),
    "L2_59_Matmul_Swish_Scaling": ("level2/59_Matmul_Swish_Scaling.py", HERE / "kernelbench/matmul_swish.py", False),
}
# measured only when named (--only): the same GEMM with its autotuning cached on disk
EXTRA = {
    "L2_59_autotune_cached": ("level2/59_Matmul_Swish_Scaling.py", HERE / "kernelbench/matmul_swish_cached.py", False),
}
PROBLEMS.update(EXTRA)
DEFAULT = [name for name in PROBLEMS if name not in EXTRA]


class Ran:
    """What a child process left: returncode, stdout, stderr (rc 124 when it ran past the timeout)."""

    def __init__(self, returncode: int, stdout: str, stderr: str) -> None:
        self.returncode, self.stdout, self.stderr = returncode, stdout, stderr


def run(command: list[str], timeout: float, **kwargs) -> Ran:
    """subprocess.run in a session of its own; on a timeout the whole group (its workers too) is killed."""
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True, **kwargs)
    try:
        out, err = proc.communicate(timeout=timeout)
        return Ran(proc.returncode, out, err)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, 9)
        out, err = proc.communicate()
        return Ran(124, out, err + f"\n[killed after {timeout:.0f} s]")


def emit(out: Path, name: str, row: dict) -> None:
    out.mkdir(parents=True, exist_ok=True)
    with open(out / f"{name}.jsonl", "a") as f:
        f.write(json.dumps(row, default=str) + "\n")
    print(json.dumps(row, default=str)[:1500], flush=True)


# --- KernelBench's harness -------------------------------------------------------------------

def harness_one(kb: Path, problem: str, candidate: Path) -> dict:
    """In this process: import KernelBench's harness, then one eval_kernel_against_ref call."""
    started = time.perf_counter()
    sys.path.insert(0, str(kb / "src"))
    import torch

    t0 = time.perf_counter()
    try:
        from kernelbench.eval import eval_kernel_against_ref
    except Exception as exc:  # nothing of theirs is stubbed: say what is missing
        return {"import_error": f"{type(exc).__name__}: {exc}", "missing": getattr(exc, "name", None)}
    import_s = time.perf_counter() - t0
    ref_src = (kb / "KernelBench" / problem).read_text()
    cand_src = candidate.read_text()
    with tempfile.TemporaryDirectory() as build_dir:
        t0 = time.perf_counter()
        result = eval_kernel_against_ref(ref_src, cand_src, seed_num=42, num_correct_trials=5, num_perf_trials=100,
                                         measure_performance=True, timing_method="cuda_event", verbose=False,
                                         build_dir=build_dir, device=0, backend="triton", precision=torch.float32)
        torch.cuda.synchronize()
        call_s = time.perf_counter() - t0
    row = {"import_s": import_s, "harness_s": call_s, "before_call_s": t0 - started}
    if result is None:
        row["result"] = None
    else:
        row.update(compiled=result.compiled, correctness=result.correctness, runtime_us=result.runtime,
                   ref_runtime_us=result.ref_runtime,
                   metadata={k: str(v)[:300] for k, v in result.metadata.items()})
    return row


def run_harness(args: argparse.Namespace) -> None:
    for name in args.only or DEFAULT:
        problem, candidate, _ = PROBLEMS[name]
        t0 = time.perf_counter()
        proc = run([sys.executable, __file__, "harness-one", "--kb", str(args.kb), "--name", name], args.timeout)
        wall = time.perf_counter() - t0
        row = {"problem": name, "side": "harness", "wall_incl_import_s": wall, "rc": proc.returncode}
        lines = [line for line in proc.stdout.splitlines() if line.startswith("{")]
        if lines:
            row.update(json.loads(lines[-1]))
        if proc.returncode or not lines:
            row["stderr_tail"] = proc.stderr[-2000:]
        emit(args.out, "harness", row)


# --- ratchet -----------------------------------------------------------------------------------

def warm_one(problem: Path, candidate: Path, evals: int, device: str) -> dict:
    """In this process: one Evaluator, `evals` evaluations of the same source."""
    from tools import EvalOptions, Evaluator

    source = candidate.read_text()
    t0 = time.perf_counter()
    ev = Evaluator(problem, EvalOptions(device=device))
    setup = time.perf_counter() - t0
    runs = []
    try:
        for _ in range(evals):
            t0 = time.perf_counter()
            result = ev.evaluate(source)
            runs.append({"wall_s": time.perf_counter() - t0, "verdict": result.verdict.value,
                         "message": (result.message or "")[:600], "phases": result.phases,
                         "median_ms": result.candidate_time.median_ms if result.candidate_time else None,
                         "speedup_eager": result.speedup_vs_eager})
    finally:
        ev.close()
    return {"setup_s": setup, "runs": runs}


def run_ratchet(args: argparse.Namespace) -> None:
    cache = Path(args.cache_dir or tempfile.mkdtemp(prefix="ratchet-cache-"))
    env = dict(os.environ, RATCHET_CACHE_DIR=str(cache))
    for name in args.only or DEFAULT:
        problem, candidate, _ = PROBLEMS[name]
        path = args.kb / "KernelBench" / problem
        for i in range(args.cold):
            t0 = time.perf_counter()
            proc = run([sys.executable, "-m", "agent.cli", "eval", str(path), str(candidate), "--json",
                        "--device", args.device], args.timeout, env=env, cwd=ROOT)
            wall = time.perf_counter() - t0
            row = {"problem": name, "side": "ratchet_cold", "run": i + 1, "wall_s": wall, "rc": proc.returncode}
            try:
                record = json.loads(proc.stdout)
                row.update(verdict=record.get("verdict"), message=(record.get("message") or "")[:600],
                           phases=record.get("phases"),
                           median_ms=(record.get("candidate_time") or {}).get("median_ms"))
            except ValueError:
                row["stdout_tail"] = proc.stdout[-1000:]
            if proc.returncode:
                row["stderr_tail"] = proc.stderr[-1500:]
            emit(args.out, "ratchet", row)
        t0 = time.perf_counter()
        proc = run([sys.executable, __file__, "warm-one", "--kb", str(args.kb), "--name", name,
                    "--evals", str(args.evals), "--device", args.device], args.timeout, env=env, cwd=ROOT)
        row = {"problem": name, "side": "ratchet_warm", "process_s": time.perf_counter() - t0, "rc": proc.returncode}
        lines = [line for line in proc.stdout.splitlines() if line.startswith("{")]
        if lines:
            row.update(json.loads(lines[-1]))
        if proc.returncode or not lines:
            row["stderr_tail"] = proc.stderr[-2000:]
        emit(args.out, "ratchet", row)


# --- where L2_59's `build` goes ----------------------------------------------------------------

def init_time(device: str) -> dict:
    """L2_59's constructor (nn.Linear(32768, 32768): 4 GiB of weights) the way a worker builds a
    model today (on the CPU, then moved) against made on the device directly."""
    import torch
    import torch.nn as nn

    torch.empty(1, device=device)
    row = {}
    for how in ("cpu_then_to", "on_device"):
        torch.manual_seed(0)
        t0 = time.perf_counter()
        if how == "cpu_then_to":
            layer = nn.Linear(32768, 32768).to(device)
        else:
            with torch.device(device):
                layer = nn.Linear(32768, 32768)
        torch.cuda.synchronize()
        row[f"{how}_s"] = time.perf_counter() - t0
        del layer
        torch.cuda.empty_cache()
    row["threads"] = torch.get_num_threads()
    return row


# --- the report --------------------------------------------------------------------------------

def load_rows(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()] if path.exists() else []


def fmt(x: float | None, unit: str = "") -> str:
    return "-" if x is None else f"{x:.1f}{unit}"


def report(args: argparse.Namespace) -> None:
    harness = {r["problem"]: r for r in load_rows(args.out / "harness.jsonl")}
    ratchet = load_rows(args.out / "ratchet.jsonl")
    print("| problem | harness in-process s | harness incl. import s | ratchet eval cold s | warm evaluator s per evaluation "
          "| cold / harness incl. import (target <= 1) | harness in-process / warm (target >= 3x; >= 10x multi-GB) |")
    print("|---|---|---|---|---|---|---|")
    for name, (_, _, big) in PROBLEMS.items():
        if name in EXTRA and not any(r["problem"] == name for r in ratchet):
            continue
        h = harness.get(name, {})
        cold = [r for r in ratchet if r["problem"] == name and r["side"] == "ratchet_cold"]
        warm = next((r for r in ratchet if r["problem"] == name and r["side"] == "ratchet_warm"), {})
        runs = warm.get("runs", [])
        hs, hi = h.get("harness_s"), h.get("wall_incl_import_s") if "harness_s" in h else None
        cold_s = [r["wall_s"] for r in cold if r.get("verdict") == "ok"]
        warm_s = [r["wall_s"] for r in runs if r.get("verdict") == "ok"]
        per_warm = sum(warm_s) / len(warm_s) if warm_s else None
        r_cold = ", ".join(f"{c / hi:.2f}" for c in cold_s) if hi and cold_s else "-"
        r_warm = f"{hs / per_warm:.1f}x" if hs and per_warm else "-"
        note = "" if "harness_s" in h else f" (harness: {h.get('import_error') or h.get('stderr_tail', 'did not run')[-200:]})"
        verdicts = {r.get("verdict") for r in cold} | {r.get("verdict") for r in runs}
        if verdicts - {"ok"}:
            note += f" (ratchet verdicts: {sorted(str(v) for v in verdicts)})"
        print(f"| {name}{' (multi-GB)' if big else ''} | {fmt(hs)} | {fmt(hi)} | "
              f"{', '.join(fmt(c) for c in [r['wall_s'] for r in cold]) or '-'} | "
              f"{', '.join(fmt(r['wall_s']) for r in runs) or '-'} (setup {fmt(warm.get('setup_s'))}) | {r_cold} | "
              f"{r_warm}{note} |")
    print()
    print("phases (s): build, first_trial, boot, start per evaluation")
    for r in ratchet:
        runs = r.get("runs") or [r]
        for k, run in enumerate(runs):
            p = run.get("phases") or {}
            print(f"  {r['problem']} {r['side']} {r.get('run', k + 1)}: verdict {run.get('verdict')}, wall "
                  f"{fmt(run.get('wall_s'))}, build {p.get('build')}, first_trial {p.get('first_trial')}, "
                  f"boot {p.get('boot')}, start {p.get('start')}, median {run.get('median_ms')} ms")
    for r in load_rows(args.out / "init_time.jsonl"):
        print(f"  nn.Linear(32768, 32768) on {r.get('threads')} CPU threads: made on the CPU then moved "
              f"{fmt(r.get('cpu_then_to_s'))} s, made on the device {r.get('on_device_s'):.3f} s")
    for name, h in harness.items():
        print(f"  {name} harness: correct {h.get('correctness')}, runtime {h.get('runtime_us')} "
              f"(ref {h.get('ref_runtime_us')}), import {fmt(h.get('import_s'))} s, before call {fmt(h.get('before_call_s'))} s")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("role", choices=["harness", "ratchet", "report", "harness-one", "warm-one", "init-time"])
    parser.add_argument("--kb", type=Path, help="a KernelBench checkout (KernelBench/ and src/)")
    parser.add_argument("--out", type=Path, default=Path("kernelbench_compare"))
    parser.add_argument("--only", nargs="*", choices=list(PROBLEMS))
    parser.add_argument("--name", choices=list(PROBLEMS))
    parser.add_argument("--cold", type=int, default=2, help="cold `ratchet eval` runs per problem")
    parser.add_argument("--evals", type=int, default=3, help="evaluations by the one warm evaluator")
    parser.add_argument("--device", default="cuda:0")
    parser.add_argument("--cache-dir", help="the cache dir the ratchet side shares (default: a fresh one)")
    parser.add_argument("--timeout", type=float, default=900)
    args = parser.parse_args()
    if args.kb:
        args.kb = args.kb.resolve()
    if args.role == "harness-one":
        problem, candidate, _ = PROBLEMS[args.name]
        print(json.dumps(harness_one(args.kb, problem, candidate), default=str))
    elif args.role == "warm-one":
        problem, candidate, _ = PROBLEMS[args.name]
        sys.path.insert(0, str(ROOT))
        print(json.dumps(warm_one(args.kb / "KernelBench" / problem, candidate, args.evals, args.device), default=str))
    elif args.role == "init-time":
        emit(args.out, "init_time", init_time(args.device))
    elif args.role == "harness":
        run_harness(args)
    elif args.role == "ratchet":
        run_ratchet(args)
    else:
        report(args)


if __name__ == "__main__":
    main()
