"""GPU memory of one evaluation, per process, at KernelBench's published sizes: the parent, the
reference worker and the candidate's worker against what a KernelBench-style harness holds in
one process (its inputs, the reference's outputs and the candidate's: I + 2O).

For each problem (default: three multi-GB ones of benchmarks/memory_bound/), the built-in
policy's first draft is evaluated once, with the full trials and timing; a thread samples every
process's GPU memory (nvidia-smi, every 50 ms) and the card's total, and the peaks are printed
per role, in GiB and as multiples of I + 2O. A process is the parent (this one), the reference
worker (its command line says so) or a candidate's worker (any other child on the card).

    python benchmarks/eval_memory.py [PROBLEM_PREFIX ...] [--json OUT] [--tree DIR] [--trace]

--tree DIR evaluates with the evaluator (tools/) of DIR, another checkout (e.g. `git archive REV
tools | tar -x -C DIR`), for a before-and-after comparison run side by side.

Needs a CUDA GPU and nvidia-smi. docs/evaluator.md has what it printed.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
PROBLEMS = ROOT / "benchmarks" / "memory_bound"
DEFAULT = ("02_", "07_", "13_")
GIB = float(1 << 30)


class Sampler(threading.Thread):
    """Peak GPU memory (MiB) per process role and of the whole card, sampled with nvidia-smi."""

    def __init__(self, reference_pids: set[int]) -> None:
        super().__init__(daemon=True)
        self.reference_pids = reference_pids
        self.peaks: dict[str, float] = {"parent": 0.0, "reference": 0.0, "candidate": 0.0, "card": 0.0}
        self.unseen = 0  # samples where the card held memory but nvidia-smi named no process
        self.stop = threading.Event()

    def role(self, pid: int) -> str:
        if pid == os.getpid():
            return "parent"
        if pid in self.reference_pids:
            return "reference"
        return "candidate"

    def run(self) -> None:
        while not self.stop.is_set():
            apps = _smi(["--query-compute-apps=pid,used_memory"])
            card = _smi(["--query-gpu=memory.used"])
            now: dict[str, float] = {}
            for line in apps:
                pid, mib = (x.strip() for x in line.split(","))
                role = self.role(int(pid))
                now[role] = now.get(role, 0.0) + float(mib)
            for role, mib in now.items():
                self.peaks[role] = max(self.peaks[role], mib)
            if card:
                self.peaks["card"] = max(self.peaks["card"], float(card[0]))
                if not apps and float(card[0]) > 1024:
                    self.unseen += 1
            time.sleep(0.05)


def _smi(query: list[str]) -> list[str]:
    out = subprocess.run(["nvidia-smi", *query, "--format=csv,noheader,nounits", "-i", "0"],
                         capture_output=True, text=True, timeout=10).stdout
    return [line for line in out.splitlines() if line.strip()]


def draft(path: Path) -> str:
    from agent.builtin import codegen, search
    from agent.builtin.recognize import recognize

    rec = recognize(path)
    if rec.plan is None:
        raise SystemExit(f"{path.name}: the built-in policy does not recognize it ({rec.reason})")
    return codegen.draft(rec.plan, rec.problem, search.space(rec.plan)[0])


def largest_allocations(n: int = 4) -> list[str]:
    """The parent's largest CUDA allocations by torch's allocator during the run, with the
    innermost frames of ours that made them (torch's memory history, recorded by --trace)."""
    import torch

    events = [e for e in torch.cuda.memory._snapshot()["device_traces"][0] if e.get("action") == "alloc"]
    lines = []
    for event in sorted(events, key=lambda e: -e["size"])[:n]:
        ours = [f"{Path(f['filename']).name}:{f['line']} {f['name']}" for f in event.get("frames", [])
                if str(ROOT) in f["filename"]][:4]
        lines.append(f"{event['size'] / GIB:.2f} GiB at {' < '.join(ours) or '?'}")
    return lines


def measure(path: Path, trace: bool = False) -> dict:
    from tools import EvalOptions, Evaluator

    source = draft(path)
    if trace:
        import torch

        torch.cuda.memory._record_memory_history(max_entries=200_000)
    started = time.monotonic()
    with Evaluator(path, EvalOptions(device="cuda:0")) as ev:
        pids = {ev.reference.proc.pid}
        sampler = Sampler(pids)
        sampler.start()
        try:
            result = ev.evaluate(source)
        finally:
            sampler.stop.set()
            sampler.join()
        inputs, outputs = ev.problem.input_bytes, ev.problem.output_bytes
    harness = inputs + 2 * outputs
    peaks = {role: mib * (1 << 20) / GIB for role, mib in sampler.peaks.items()}
    row = {"problem": path.stem, "verdict": result.verdict.value, "message": result.message.splitlines()[0][:200]
           if result.message else "", "input_gib": inputs / GIB, "output_gib": outputs / GIB,
           "harness_gib": harness / GIB, "peaks_gib": peaks, "unseen_samples": sampler.unseen,
           "seconds": time.monotonic() - started,
           "failed": [f"{c.name}: {c.detail}" for c in result.checks if not c.passed][:3],
           "parent_largest": largest_allocations() if trace else []}
    row["per_process_sum_over_harness"] = sum(peaks[r] for r in ("parent", "reference", "candidate")) / (harness / GIB)
    row["card_over_harness"] = peaks["card"] / (harness / GIB)
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("prefixes", nargs="*", default=list(DEFAULT))
    parser.add_argument("--json", type=Path)
    parser.add_argument("--tree", type=Path, help="evaluate with the tools/ of this checkout")
    parser.add_argument("--trace", action="store_true", help="print the parent's largest allocations and where")
    args = parser.parse_args()
    if args.tree:
        sys.path.insert(0, str(args.tree.resolve()))
    rows = []
    for prefix in args.prefixes:
        for path in sorted(PROBLEMS.glob(f"{prefix}*.py")):
            row = measure(path, args.trace)
            rows.append(row)
            p = row["peaks_gib"]
            print(f"{row['problem']}: {row['verdict']} | I {row['input_gib']:.2f} O {row['output_gib']:.2f} GiB, "
                  f"harness I+2O {row['harness_gib']:.2f} | peaks GiB: parent {p['parent']:.2f}, reference "
                  f"{p['reference']:.2f}, candidate {p['candidate']:.2f}, card {p['card']:.2f} | sum of processes / "
                  f"harness {row['per_process_sum_over_harness']:.2f}x, card / harness {row['card_over_harness']:.2f}x "
                  f"| {row['seconds']:.0f} s {row['message'][:120]}", flush=True)
            for line in row["parent_largest"] + row["failed"]:
                print("   ", line[:400])
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
