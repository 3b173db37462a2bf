"""Draft the built-in policy's candidates for the window problems (pooling, scans, arg-reductions)
into a folder a GPU machine can run without this repository's agent: every configuration of each
problem's search space (up to --configs), with a manifest for benchmarks/window_gpu_check.py (copy
the folder and that script to the GPU machine). The problems measured, at KernelBench's published
sizes: benchmarks/membound_window/ (SUITE_SCALE=small shrinks them for a CPU batch).

    python benchmarks/window_draft.py OUT_DIR [--configs 6] benchmarks/membound_window/*.py
"""
from __future__ import annotations

import argparse
import json
import shutil
from pathlib import Path

from agent.builtin import codegen, search
from agent.builtin.recognize import recognize


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("problems", type=Path, nargs="+")
    parser.add_argument("--configs", type=int, default=6)
    args = parser.parse_args()
    (args.out / "problems").mkdir(parents=True, exist_ok=True)
    (args.out / "candidates").mkdir(exist_ok=True)
    manifest = []
    for problem in args.problems:
        rec = recognize(problem)
        if rec.plan is None:
            print(f"{problem.name}: not recognized ({rec.reason})")
            continue
        shutil.copy(problem, args.out / "problems" / problem.name)
        entry = {"problem": f"problems/{problem.name}", "kind": rec.plan.kind, "summary": rec.plan.summary,
                 "candidates": []}
        for i, config in enumerate(search.space(rec.plan)[:args.configs]):
            name = f"candidates/{problem.stem}__{i}.py"
            (args.out / name).write_text(codegen.draft(rec.plan, rec.problem, config))
            entry["candidates"].append({"file": name, "config": config})
        manifest.append(entry)
        print(f"{problem.name}: {rec.plan.kind}, {len(entry['candidates'])} configurations")
    (args.out / "manifest.json").write_text(json.dumps(manifest, indent=1))


if __name__ == "__main__":
    main()
