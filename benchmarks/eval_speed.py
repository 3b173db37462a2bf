"""Seconds per candidate evaluation: ratchet's evaluator against a KernelBench-style path, and
against another checkout of ratchet (`--baseline DIR`, e.g. a `git worktree` of an earlier commit).

    python benchmarks/eval_speed.py [--evals 3] [--only NAME] [--json OUT] [--baseline DIR]

For each problem, both paths evaluate the same honest Triton candidate:
- ratchet: one Evaluator per problem (reference worker, spare candidate worker: paid once per
  problem), then --evals evaluations of the candidate, each in a fresh sandboxed worker, with
  5 correctness trials and the full timing protocol. The first evaluation also times
  torch.compile and the device ceilings (cached after it); the figure we compare is the mean
  of the later evaluations, the steady state of a batch or RL run (and, with --baseline, their
  median beside it: an evaluation that waits on a spare worker's start moves the mean).
- KernelBench-style, written here for comparison: a fresh process per candidate that imports
  reference and candidate, builds both models, makes inputs on the CPU and copies them to the
  GPU, runs 5 correctness trials (allclose 1e-2), then times 100 calls (mean of CUDA events).
It prints seconds per evaluation by phase for both, the ratio, and how well two ratchet
evaluations of the same kernel agree on its median time. With --baseline, the same ratchet
measurements run again with the evaluator of DIR, in the same run, and it prints the steady-state
ratio (this tree / DIR) per problem and the start of one candidate worker (spawn to ready; a
confined worker in this tree) in both. Needs a CUDA GPU.
"""
from __future__ import annotations

import argparse
import importlib.util
import json
import re
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
CASES = {
    "swish_scale": (ROOT / "examples/swish_problem.py", ROOT / "examples/swish_candidate.py"),
    "row_softmax": (HERE / "problems/row_softmax.py", HERE / "candidates/row_softmax.py"),
    "matmul_fp16": (HERE / "problems/matmul_fp16.py", HERE / "candidates/matmul_fp16.py"),
    "big_swish": (HERE / "problems/big_swish.py", HERE / "candidates/big_swish.py"),
    "matmul_fp32": (HERE / "problems/matmul_fp32.py", HERE / "candidates/matmul_fp32.py"),
    # rows that do not stand alone over float64_max_mb: float64 judged on sets evaluated on the host
    "batch_norm_train": (HERE / "problems/batch_norm_train.py", HERE / "candidates/batch_norm_train.py"),
}


def load(path: Path, name: str):
    """Import a problem or candidate file as a module, as a plain harness would."""
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def kernelbench_style(problem: Path, candidate: Path, device: str) -> dict[str, float]:
    """The comparison path: everything in one process, inputs made on the CPU."""
    import torch

    phases: dict[str, float] = {}
    t0 = time.perf_counter()
    torch.empty(1, device=device)
    phases["cuda_init"] = time.perf_counter() - t0

    t0 = time.perf_counter()
    ref_mod, cand_mod = load(problem, "kb_ref"), load(candidate, "kb_cand")
    init = ref_mod.get_init_inputs()
    torch.manual_seed(42)
    model = ref_mod.Model(*init).to(device)
    torch.manual_seed(42)
    new = cand_mod.ModelNew(*init).to(device)
    phases["load"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    with torch.no_grad():
        for trial in range(5):
            torch.manual_seed(trial)
            inputs = [x.to(device) if isinstance(x, torch.Tensor) else x for x in ref_mod.get_inputs()]
            ok = torch.allclose(model(*inputs), new(*inputs), atol=1e-2, rtol=1e-2)
            torch.cuda.synchronize()
            if not ok:
                raise SystemExit(f"{candidate.name}: incorrect in the KernelBench-style path")
            del inputs
    phases["correctness"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    torch.manual_seed(5)
    inputs = [x.to(device) if isinstance(x, torch.Tensor) else x for x in ref_mod.get_inputs()]
    times = []
    with torch.no_grad():
        for _ in range(3):
            new(*inputs)
        for _ in range(100):
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            new(*inputs)
            end.record()
            torch.cuda.synchronize()
            times.append(start.elapsed_time(end))
    phases["timing"] = time.perf_counter() - t0
    phases["mean_ms"] = sum(times) / len(times)
    return phases


def run_kernelbench_style(name: str, device: str) -> dict[str, float]:
    problem, candidate = CASES[name]
    t0 = time.perf_counter()
    out = subprocess.run([sys.executable, __file__, "--kb-one", name, "--device", device],
                         capture_output=True, text=True, check=True)
    phases = json.loads(out.stdout.strip().splitlines()[-1])
    phases["total"] = time.perf_counter() - t0  # a fresh process per candidate, as such harnesses run
    return phases


def run_ratchet_in(root: Path, name: str, device: str, evals: int, spares: int) -> dict:
    """run_ratchet with the evaluator of another checkout, in a process of its own."""
    out = subprocess.run([sys.executable, __file__, "--ratchet-one", name, "--tools-root", str(root), "--device", device,
                          "--evals", str(evals), "--spares", str(spares)], capture_output=True, text=True)
    if out.returncode != 0:
        raise RuntimeError(f"{name} with {root}: " + " | ".join((out.stderr or out.stdout).strip().splitlines()[-4:]))
    return json.loads(out.stdout.strip().splitlines()[-1])


def worker_start(device: str, count: int = 5) -> list[float]:
    """Seconds from spawning a candidate worker to its `ready` (CUDA context, torch, the
    evaluator's own kernels; in this tree, inside its OS sandbox)."""
    from tools.evaluate import EvalOptions, Evaluator

    problem, _ = CASES["swish_scale"]
    times = []
    with Evaluator(problem, EvalOptions(device=device, trials=1, spares=0, warm=False)) as ev:
        for _ in range(count):
            t0 = time.perf_counter()
            proc = ev._spawn("candidate")
            ready = proc.wait_ready(ev.options.start_timeout)
            times.append(time.perf_counter() - t0)
            proc.close()
            if ready.get("op") != "ready":
                raise RuntimeError(f"worker did not start: {ready}")
    return times


def run_ratchet(name: str, device: str, evals: int, spares: int) -> dict:
    from tools.evaluate import EvalOptions, Evaluator

    problem, candidate = CASES[name]
    source = candidate.read_text()
    t0 = time.perf_counter()
    ev = Evaluator(problem, EvalOptions(device=device, trials=5, spares=spares))
    setup = time.perf_counter() - t0
    runs = []
    try:
        for _ in range(evals):
            t0 = time.perf_counter()
            result = ev.evaluate(source)
            wall = time.perf_counter() - t0
            if not result.ok:
                raise RuntimeError(f"{name}: ratchet says {result.verdict.value}: {result.message}")
            runs.append({"wall": wall, "phases": result.phases, "median_ms": result.candidate_time.median_ms,
                         "ci": [result.candidate_time.ci_low_ms, result.candidate_time.ci_high_ms],
                         "samples": result.candidate_time.samples, "speedup_eager": result.speedup_vs_eager,
                         "speedup_compile": result.speedup_vs_compile,
                         "roofline": result.roofline.achieved_fraction, "trials": result.trials,
                         "clock_rounds": clock_rounds(result)})
    finally:
        ev.close()
    return {"setup": setup, "runs": runs}


def clock_rounds(result) -> int | None:
    """Rounds of gated passes the second clock measured (3 unless it was in doubt), from its check."""
    for check in result.checks:
        if check.name == "timing:two-clocks":
            found = re.search(r"; (\d+) rounds,", check.detail or "")
            return int(found.group(1)) if found else 3
    return None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--evals", type=int, default=3)
    parser.add_argument("--spares", type=int, default=4, help="candidate workers kept started (default 4: a worker takes ~1.5 s to start, a steady-state evaluation well under that)")
    parser.add_argument("--only", action="append", choices=sorted(CASES))
    parser.add_argument("--device", default="cuda:0")
    parser.add_argument("--json", type=Path)
    parser.add_argument("--baseline", type=Path, help="another checkout of ratchet to measure side by side")
    parser.add_argument("--kb-one", help=argparse.SUPPRESS)
    parser.add_argument("--ratchet-one", help=argparse.SUPPRESS)
    parser.add_argument("--start-only", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--tools-root", type=Path, default=ROOT, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.kb_one:
        print(json.dumps(kernelbench_style(*CASES[args.kb_one], args.device)))
        return
    sys.path.insert(0, str(args.tools_root))
    if args.ratchet_one:
        print(json.dumps(run_ratchet(args.ratchet_one, args.device, args.evals, args.spares), default=str))
        return
    if args.start_only:
        print(json.dumps(worker_start(args.device)))
        return
    if args.baseline:
        compare_baseline(args)
        return
    report = {}
    rows = []
    for name in args.only or list(CASES):
        try:
            kb = run_kernelbench_style(name, args.device)
            ours = run_ratchet(name, args.device, args.evals, args.spares)
        except (RuntimeError, subprocess.CalledProcessError) as exc:
            print(f"{name}: FAILED: {exc}", flush=True)
            continue
        steady = ours["runs"][1:] or ours["runs"]
        per_eval = sum(r["wall"] for r in steady) / len(steady)
        medians = [r["median_ms"] for r in ours["runs"][1:]] or [ours["runs"][0]["median_ms"]]
        spread = (max(medians) - min(medians)) / min(medians) if len(medians) > 1 else 0.0
        report[name] = {"kernelbench_style": kb, "ratchet": ours, "ratio": kb["total"] / per_eval, "repeat_spread": spread}
        if args.json:
            args.json.write_text(json.dumps(report, indent=2, default=str))
        rows.append((name, kb["total"], ours["runs"][0]["wall"], per_eval, kb["total"] / per_eval, spread, steady[-1]))
        print(f"{name}: KernelBench-style phases " + ", ".join(f"{k} {v:.3f}" for k, v in kb.items()), flush=True)
        print(f"{name}: ratchet setup {ours['setup']:.2f}s; per evaluation " +
              "; ".join(", ".join(f"{k} {v:.3f}" for k, v in r["phases"].items()) for r in ours["runs"]), flush=True)
    print()
    print(f"{'problem':<12} {'KB-style s':>10} {'ratchet 1st s':>13} {'ratchet s':>9} {'ratio':>6} {'repeat':>7}  median / speedups / roofline")
    for name, kb_s, first, per, ratio, spread, last in rows:
        print(f"{name:<12} {kb_s:>10.2f} {first:>13.2f} {per:>9.2f} {ratio:>5.1f}x {spread:>6.2%}  "
              f"{last['median_ms']:.4g} ms (n={last['samples']}), {last['speedup_eager']:.2f}x eager, "
              f"{(last['speedup_compile'] or float('nan')):.2f}x compile, roofline {(last['roofline'] or 0):.0%}")
    if args.json:
        args.json.write_text(json.dumps(report, indent=2, default=str))


def compare_baseline(args: argparse.Namespace) -> None:
    """This tree against --baseline, interleaved problem by problem in one run."""
    rows, report = [], {}
    for name in args.only or list(CASES):
        try:
            # both trees share the build and baseline caches: one evaluation first fills them, so
            # that neither side pays compiles the other then reuses (measured on an H100: the side
            # that ran first compiled in its first two evaluations, 0.3-0.7 s each)
            run_ratchet_in(ROOT, name, args.device, 1, args.spares)
            ours = run_ratchet_in(ROOT, name, args.device, args.evals, args.spares)
            base = run_ratchet_in(args.baseline, name, args.device, args.evals, args.spares)
        except RuntimeError as exc:
            print(f"{name}: FAILED: {exc}", flush=True)
            continue
        per = [sum(r["wall"] for r in (x["runs"][1:] or x["runs"])) / len(x["runs"][1:] or x["runs"]) for x in (ours, base)]
        # the median too: one evaluation that waited on a spare worker's start moves the mean by 20-40%
        mid = [statistics.median(r["wall"] for r in (x["runs"][1:] or x["runs"])) for x in (ours, base)]
        report[name] = {"this": ours, "baseline": base, "ratio": per[0] / per[1], "median_ratio": mid[0] / mid[1]}
        rows.append((name, per[0], per[1], per[0] / per[1], mid[0] / mid[1], ours["runs"][-1]["median_ms"],
                     base["runs"][-1]["median_ms"]))
        print(f"{name}: this tree per evaluation " + "; ".join(", ".join(f"{k} {v:.3f}" for k, v in r["phases"].items()) for r in ours["runs"]), flush=True)
        print(f"{name}: baseline per evaluation " + "; ".join(", ".join(f"{k} {v:.3f}" for k, v in r["phases"].items()) for r in base["runs"]), flush=True)
        # as each problem ends, not only in the table: a run cut short by a time limit keeps its figures
        print(f"{name}: steady state this {per[0]:.3f} s, baseline {per[1]:.3f} s, ratio {per[0] / per[1]:.2f}x; "
              f"medians {mid[0]:.3f} / {mid[1]:.3f} s, {mid[0] / mid[1]:.2f}x", flush=True)
        print(f"{name}: second-clock rounds per evaluation this {[r.get('clock_rounds') for r in ours['runs']]}, "
              f"baseline {[r.get('clock_rounds') for r in base['runs']]}", flush=True)
        if args.json:
            args.json.write_text(json.dumps(report, indent=2, default=str))
    starts = {}
    for label, root in (("this", ROOT), ("baseline", args.baseline)):
        out = subprocess.run([sys.executable, __file__, "--start-only", "--tools-root", str(root), "--device", args.device],
                             capture_output=True, text=True, check=True)
        starts[label] = json.loads(out.stdout.strip().splitlines()[-1])
    report["worker_start"] = starts
    print()
    print(f"{'problem':<12} {'this s':>8} {'baseline s':>10} {'ratio':>6} {'of medians':>10}  median ms this / baseline")
    for name, ours_s, base_s, ratio, mid_ratio, m1, m0 in rows:
        print(f"{name:<12} {ours_s:>8.3f} {base_s:>10.3f} {ratio:>5.2f}x {mid_ratio:>9.2f}x  {m1:.4g} / {m0:.4g}")
    mean = lambda xs: sum(xs) / len(xs)  # noqa: E731
    print(f"worker start (spawn to ready, s): this {mean(starts['this']):.2f} {['%.2f' % x for x in starts['this']]}, "
          f"baseline {mean(starts['baseline']):.2f} {['%.2f' % x for x in starts['baseline']]}")
    if args.json:
        args.json.write_text(json.dumps(report, indent=2, default=str))


if __name__ == "__main__":
    main()
