"""Time the built-in policy's first drafts of each problem on a GPU against eager PyTorch and
torch.compile: a tuning aid, run in this process without the evaluator (the figures that count come
from `ratchet batch benchmarks/memory_bound --model builtin` and `ratchet report`).

For each problem of benchmarks/memory_bound/ (issue 18's measurement set, at KernelBench's published
sizes): the first configurations of the policy's search space are drafted (as `ratchet optimize
--model builtin` would propose them, in that order), each is checked against the eager output with
the evaluator's tolerances and timed (median, triton.testing.do_bench); the roofline floor comes from
tools/worker/cost.py and tools/timing/roofline.py (least bytes and flops, ceilings measured on the card). One JSON object per
problem goes to OUT/results.jsonl, a line per problem to stdout, and the geometric mean over
torch.compile of the memory-bound problems at the end.

    python3 benchmarks/builtin_drafts.py OUT [PROBLEM_PREFIX ...] [--configs N] [--deadline SECONDS]
"""
from __future__ import annotations

import argparse
import importlib.util
import json
import math
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from agent.builtin import codegen, search  # noqa: E402
from agent.builtin.recognize import recognize  # noqa: E402
from tools.timing import roofline  # noqa: E402
from tools.worker import cost  # noqa: E402
from tools.judge.compare import tolerance_for  # noqa: E402

PROBLEMS = ROOT / "benchmarks" / "memory_bound"


def _import(path: Path, name: str):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _time(fn) -> float:
    import triton

    return float(triton.testing.do_bench(fn, warmup=10, rep=60, return_mode="median"))


def _error(got: torch.Tensor, expected: torch.Tensor) -> dict:
    tol = tolerance_for(expected.dtype)
    diff = (got.float() - expected.float()).abs()
    rms = expected.float().pow(2).mean().sqrt().item() or 1.0
    ok = bool(torch.all(diff <= tol.atol * rms + tol.rtol * expected.float().abs()).item())
    return {"ok": ok and got.shape == expected.shape, "max_abs_over_rms": diff.max().item() / rms}


def run_problem(path: Path, workdir: Path, n_configs: int, ceilings) -> dict:
    rec = recognize(path)
    if rec.plan is None:
        return {"problem": path.stem, "recognized": False, "reason": rec.reason}
    space = search.space(rec.plan)
    configs = space[:n_configs]
    ref = _import(path, f"ref_{path.stem}")
    init = ref.get_init_inputs()
    with torch.device("cuda"):
        torch.manual_seed(3)
        model = ref.Model(*init).eval()
        torch.manual_seed(4)
        inputs = list(ref.get_inputs())
    size = cost.analyse_problem(lambda: ref.Model(*init), ref.get_inputs)
    floor = roofline.floor_ms(size.bytes_moved, size.flops, size.dtype, ceilings)
    memory_s = size.bytes_moved / ceilings.copy_bytes_per_s
    compute_ieee_s = size.flops / ceilings.rate("float32", fp32_uses_tf32=False) if size.flops else 0.0
    row = {"problem": path.stem, "kind": rec.plan.kind, "summary": rec.plan.summary, "bytes": size.bytes_moved,
           "flops": size.flops, "floor_ms": floor, "memory_bound": memory_s >= compute_ieee_s,
           "memory_ms": memory_s * 1e3, "compute_ieee_ms": compute_ieee_s * 1e3, "space": len(space)}
    with torch.no_grad():
        expected = model(*inputs)
        torch.cuda.synchronize()
        row["eager_ms"] = _time(lambda: model(*inputs))
        compiled = None
        try:
            compiled = torch.compile(model)
            compiled(*inputs)
            row["compile_ms"] = _time(lambda: compiled(*inputs))
        except Exception as exc:  # recorded: the table says torch.compile failed there
            row["compile_error"] = f"{type(exc).__name__}: {exc}"[:300]
        del compiled
        attempts = []
        for index, config in enumerate(configs):
            entry = {"config": config}
            try:
                source = codegen.draft(rec.plan, rec.problem, config)
                file = workdir / f"{path.stem}_{index}.py"
                file.write_text(source)
                cand = _import(file, f"cand_{path.stem}_{index}")
                with torch.device("cuda"):
                    torch.manual_seed(3)
                    ours = cand.ModelNew(*init).eval()
                ours.load_state_dict(model.state_dict())
                got = ours(*inputs)
                torch.cuda.synchronize()
                entry.update(_error(got, expected))
                del got
                entry["ms"] = _time(lambda: ours(*inputs))
            except Exception as exc:  # a configuration that fails is recorded, the next one runs
                entry["error"] = f"{type(exc).__name__}: {exc}"[:500]
            attempts.append(entry)
            torch.cuda.empty_cache()
    row["attempts"] = attempts
    timed = [a for a in attempts if a.get("ok") and "ms" in a]
    if timed:
        best = min(timed, key=lambda a: a["ms"])
        row["best_ms"], row["best_config"] = best["ms"], best["config"]
        row["vs_eager"] = row["eager_ms"] / best["ms"]
        if "compile_ms" in row:
            row["vs_compile"] = row["compile_ms"] / best["ms"]
        row["roofline_fraction"] = floor / best["ms"]
    del model, inputs, expected
    torch.cuda.empty_cache()
    return row


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("out")
    parser.add_argument("problems", nargs="*")
    parser.add_argument("--configs", type=int, default=4)
    parser.add_argument("--deadline", type=float, default=540.0)
    args = parser.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    workdir = out / "drafts"
    workdir.mkdir(exist_ok=True)
    start = time.monotonic()
    ceilings = roofline.Ceilings.from_dict(cost.measure_ceilings("cuda"))
    print(json.dumps({"device": torch.cuda.get_device_name(), "ceilings": ceilings.to_dict()}), flush=True)
    paths = sorted(PROBLEMS.glob("*.py"))
    if args.problems:
        paths = [p for p in paths if any(p.stem.startswith(name) for name in args.problems)]
    with (out / "results.jsonl").open("a") as sink:
        for path in paths:
            if time.monotonic() - start > args.deadline:
                print(json.dumps({"problem": path.stem, "skipped": "deadline"}), flush=True)
                continue
            began = time.monotonic()
            row = run_problem(path, workdir, args.configs, ceilings)
            row["seconds"] = round(time.monotonic() - began, 1)
            sink.write(json.dumps(row) + "\n")
            sink.flush()
            brief = {k: row.get(k) for k in ("problem", "kind", "eager_ms", "compile_ms", "best_ms", "vs_eager",
                                             "vs_compile", "roofline_fraction", "memory_bound", "seconds")}
            print(json.dumps(brief), flush=True)
            for a in row.get("attempts", []):
                print("   ", json.dumps({k: a.get(k) for k in ("config", "ms", "ok", "max_abs_over_rms", "error")}),
                      flush=True)
    ratios = []
    for line in (out / "results.jsonl").read_text().splitlines():
        row = json.loads(line)
        if row.get("memory_bound") and row.get("vs_compile"):
            ratios.append(row["vs_compile"])
    if ratios:
        print("geomean vs torch.compile (memory-bound):", math.exp(sum(map(math.log, ratios)) / len(ratios)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
