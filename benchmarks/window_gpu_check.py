"""On a GPU: check and time the candidates benchmarks/window_draft.py drafted (torch and triton only).

For each problem of the manifest: the reference on the GPU, each candidate's output compared
with it (integer outputs exactly; float outputs elementwise |a - b| <= 1e-2 * rms + 1e-2 * |b| with
the same NaN pattern, as tools/compare.py's float32 tolerance), then median times
(triton.testing.do_bench) of eager, each candidate and, with --compile, torch.compile; bytes moved
(inputs read once, output written once) over time give the achieved bandwidth. One JSON line per
problem goes to --out; a table is printed last.

    python window_gpu_check.py DIR [--compile] [--edges] [--no-time] [--out results.jsonl] [--only NAME,...]
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
from triton.testing import do_bench


def load(path: Path, name: str):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def mismatch(got: torch.Tensor, want: torch.Tensor) -> str | None:
    if got.dtype != want.dtype or got.shape != want.shape:
        return f"{got.dtype}{tuple(got.shape)} vs {want.dtype}{tuple(want.shape)}"
    if not want.is_floating_point():
        bad = int((got != want).sum())
        return f"{bad} indices differ" if bad else None
    g, w = got.float(), want.float()
    if not torch.equal(torch.isnan(g), torch.isnan(w)):
        return "NaN pattern differs"
    finite = torch.isfinite(w)
    if not torch.equal(g[~finite & ~torch.isnan(w)], w[~finite & ~torch.isnan(w)]):
        return "infinities differ"
    g, w = g[finite], w[finite]
    rms = float(w.pow(2).mean().sqrt()) or 1.0 if w.numel() else 1.0
    err = (g - w).abs() - 1e-2 * w.abs()
    worst = float(err.max()) if err.numel() else 0.0
    return None if worst <= 1e-2 * rms else f"max excess error {worst:.3g} (rms {rms:.3g})"


def edges(model, ours, inputs) -> str | None:
    """The first mismatch on inputs of small integers (ties), with NaNs, and all -inf."""
    torch.manual_seed(2)
    for case in ("ties", "nans", "-inf"):
        edited = []
        for t in inputs:
            if isinstance(t, torch.Tensor) and t.is_floating_point():
                t = torch.randint(-2, 3, t.shape, device=t.device).to(t.dtype)
                if case == "nans":
                    t.view(-1)[::7] = float("nan")
                if case == "-inf":
                    t.fill_(float("-inf"))
            edited.append(t)
        with torch.no_grad():
            found = mismatch(ours(*edited), model(*edited))
        if found:
            return f"{case}: {found}"
    return None


def nbytes(tensors) -> int:
    return sum(t.numel() * t.element_size() for t in tensors if isinstance(t, torch.Tensor))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("dir", type=Path)
    parser.add_argument("--compile", action="store_true")
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--only", default="")
    parser.add_argument("--no-time", action="store_true")
    parser.add_argument("--edges", action="store_true", help="also ties, NaNs and infinities in the float inputs")
    args = parser.parse_args()
    manifest = json.loads((args.dir / "manifest.json").read_text())
    only = {n for n in args.only.split(",") if n}
    rows = []
    for entry in manifest:
        name = Path(entry["problem"]).stem
        if only and name not in only:
            continue
        start = time.time()
        ref = load(args.dir / entry["problem"], f"ref_{name}")
        init = list(ref.get_init_inputs())
        torch.manual_seed(0)
        model = ref.Model(*init).cuda().eval()
        torch.manual_seed(1)
        inputs = [t.cuda() if isinstance(t, torch.Tensor) else t for t in ref.get_inputs()]
        with torch.no_grad():
            want = model(*inputs)
        torch.cuda.synchronize()
        moved = nbytes(inputs) + nbytes([want])
        row = {"problem": name, "summary": entry["summary"], "bytes": moved, "candidates": []}
        if not args.no_time:
            row["eager_ms"] = do_bench(lambda: model(*inputs), return_mode="median")
        for cand in entry["candidates"]:
            item = {"config": cand["config"]}
            try:
                module = load(args.dir / cand["file"], f"cand_{Path(cand['file']).stem}")
                torch.manual_seed(0)
                ours = module.ModelNew(*init).cuda().eval()
                with torch.no_grad():
                    got = ours(*inputs)
                torch.cuda.synchronize()
                item["error"] = mismatch(got, want)
                del got
                if item["error"] is None and not args.no_time:
                    with torch.no_grad():
                        item["ms"] = do_bench(lambda: ours(*inputs), return_mode="median")
            except Exception as exc:  # reported in the table: a candidate that fails to build or run
                item["error"] = f"{type(exc).__name__}: {str(exc)[:300]}"
            if args.edges and item["error"] is None:
                item["error"] = edges(model, ours, inputs)
            row["candidates"].append(item)
        if args.compile and not args.no_time:
            try:
                compiled = torch.compile(model)
                with torch.no_grad():
                    compiled(*inputs)
                    row["compile_ms"] = do_bench(lambda: compiled(*inputs), return_mode="median")
            except Exception as exc:  # torch.compile failing is a baseline's problem, recorded
                row["compile_error"] = f"{type(exc).__name__}: {str(exc)[:300]}"
            torch._dynamo.reset()
        row["seconds"] = round(time.time() - start, 1)
        rows.append(row)
        if args.out:
            with args.out.open("a") as f:
                f.write(json.dumps(row) + "\n")
        timed = [c for c in row["candidates"] if "ms" in c]
        best = min(timed, key=lambda c: c["ms"]) if timed else None
        errors = [c["error"] for c in row["candidates"] if c.get("error")]
        print(f"{name}: eager {row.get('eager_ms', float('nan')):.3f} ms, compile {row.get('compile_ms', float('nan')):.3f} ms, "
              f"best {best['ms'] if best else float('nan'):.3f} ms {best['config'] if best else ''}, first "
              f"{row['candidates'][0].get('ms', float('nan')):.3f} ms; {len(errors)} failing {errors[:2]}", flush=True)
        del model, inputs, want
        torch.cuda.empty_cache()
    print("\nproblem | eager ms | compile ms | first ms | best ms | GB/s (best) | failing")
    for row in rows:
        timed = [c["ms"] for c in row["candidates"] if "ms" in c]
        best = min(timed) if timed else math.nan
        first = row["candidates"][0].get("ms", math.nan)
        failing = sum(1 for c in row["candidates"] if c.get("error"))
        print(f"{row['problem']} | {row.get('eager_ms', math.nan):.3f} | {row.get('compile_ms', math.nan):.3f} | "
              f"{first:.3f} | {best:.3f} | {row['bytes'] / best / 1e6 if timed else math.nan:.0f} | {failing}")
    sys.exit(0)


if __name__ == "__main__":
    main()
