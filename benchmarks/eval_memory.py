"""GPU memory of one evaluation, per process, at KernelBench's published sizes: the parent, the
reference worker and the candidate's worker against what a KernelBench-style harness holds in
one process (its inputs, the reference's outputs and the candidate's: I + 2O).

For each problem (default: three multi-GB ones of benchmarks/memory_bound/), the built-in
policy's first draft is evaluated once, with the full trials and timing; a thread samples every
process's GPU memory (nvidia-smi, every 50 ms) and the card's total, and the peaks are printed
per role, in GiB and as multiples of I + 2O. A process is the parent (this one), the reference
worker (its command line says so) or a candidate's worker (any other child on the card).

    python benchmarks/eval_memory.py [PROBLEM_PREFIX ...] [--json OUT] [--tree DIR] [--trace]
    python benchmarks/eval_memory.py --kernelbench DIR --largest 20 [--part K/N] [--jsonl OUT]

--kernelbench DIR runs over the problem files of a KernelBench checkout's problem folder (DIR holds
level1/ to level3/; the files stay there, nothing is copied): every problem's inputs and outputs
are sized on the meta device (no memory, no kernels; a problem the meta device cannot run counts
its inputs only), the --largest N by bytes of inputs + outputs are evaluated, each in a fresh
process of its own (a fault, a hang or a leak stays with its problem; --timeout per problem), and
one JSON line per problem is appended to --jsonl as it finishes: the verdict, for an evaluator
fault (`error`) the whole message, the failed checks and the tail of every worker's log, the
peaks per process. --part K/N takes every N-th problem from the K-th (two cards, two halves).
The candidate is honest and made at run time, never committed: the built-in policy's first draft
(a Triton kernel of its own), or, where the policy does not recognize the problem or with
--candidate model, the problem's own Model renamed ModelNew (with the guard rules own-kernel and
single-op off; the integrity step still rejects it after the trials, before any timing, so its
peaks cover building, the trials and the held-out sizes only).

--tree DIR evaluates with the evaluator (tools/) of DIR, another checkout (e.g. `git archive REV
tools | tar -x -C DIR`), for a before-and-after comparison run side by side.

Needs a CUDA GPU and nvidia-smi (the card sampled is the first of CUDA_VISIBLE_DEVICES, or
--smi-index; set CUDA_DEVICE_ORDER=PCI_BUS_ID so the two agree). docs/evaluator.md has what it
printed.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import threading
import time
import traceback
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
PROBLEMS = ROOT / "benchmarks" / "memory_bound"
DEFAULT = ("02_", "07_", "13_")
GIB = float(1 << 30)
SMI_INDEX = os.environ.get("CUDA_VISIBLE_DEVICES", "0").split(",")[0].strip() or "0"


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
        if shutil.which("nvidia-smi") is None:
            return
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
    out = subprocess.run(["nvidia-smi", *query, "--format=csv,noheader,nounits", "-i", SMI_INDEX],
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


def model_renamed(path: Path) -> str:
    """The problem's own Model as the candidate: its source, with ModelNew defined as Model."""
    return path.read_text() + "\n\nclass ModelNew(Model):\n    pass\n"


def candidate_for(path: Path, kind: str) -> tuple[str, str, frozenset[str]]:
    """(source, how it was made, guard rules switched off) of an honest candidate for `path`."""
    if kind == "draft":
        try:
            return draft(path), "built-in draft", frozenset()
        except (SystemExit, Exception) as exc:  # noqa: BLE001 - not recognized: fall back, and say so
            reason = str(exc)[:200]
            return model_renamed(path), f"Model renamed (no draft: {reason})", frozenset({"own-kernel", "single-op"})
    return model_renamed(path), "Model renamed", frozenset({"own-kernel", "single-op"})


def measure(path: Path, trace: bool = False, kind: str = "draft", device: str = "cuda:0") -> dict:
    from tools import EvalOptions, Evaluator

    if kind == "draft" and path.parent == PROBLEMS:
        source, made, off = draft(path), "built-in draft", frozenset()
    else:
        source, made, off = candidate_for(path, kind)
    if trace:
        import torch

        torch.cuda.memory._record_memory_history(max_entries=200_000)
    started = time.monotonic()
    with Evaluator(path, EvalOptions(device=device, disabled_rules=off)) as ev:
        pids = {ev.reference.proc.pid}
        sampler = Sampler(pids)
        sampler.start()
        try:
            result = ev.evaluate(source)
        finally:
            sampler.stop.set()
            sampler.join()
        inputs, outputs = ev.problem.input_bytes, ev.problem.output_bytes
        logs = worker_logs(ev.root) if result.verdict.value == "error" else {}
    harness = inputs + 2 * outputs
    peaks = {role: mib * (1 << 20) / GIB for role, mib in sampler.peaks.items()}
    row = {"problem": path.stem, "candidate": made, "verdict": result.verdict.value,
           "message": (result.message or "") if result.verdict.value == "error" else
           (result.message.splitlines()[0][:200] if result.message else ""), "phases": result.phases,
           "worker_logs": logs, "input_gib": inputs / GIB, "output_gib": outputs / GIB,
           "harness_gib": harness / GIB, "peaks_gib": peaks, "unseen_samples": sampler.unseen,
           "seconds": time.monotonic() - started,
           "failed": [f"{c.name}: {c.detail}" for c in result.checks if not c.passed][:5],
           "parent_largest": largest_allocations() if trace else []}
    row["per_process_sum_over_harness"] = sum(peaks[r] for r in ("parent", "reference", "candidate")) / (harness / GIB)
    row["card_over_harness"] = peaks["card"] / (harness / GIB)
    return row


def worker_logs(root: Path, tail: int = 3000) -> dict[str, str]:
    """The last characters of every worker's log below the evaluator's root (read before it closes)."""
    logs = {}
    for log in sorted(Path(root).glob("*/output.log")):
        try:
            text = log.read_text(errors="replace")
        except OSError:
            continue
        if text.strip():
            logs[log.parent.name] = text[-tail:]
    return logs


def kernelbench_sizes(directory: Path) -> list[dict]:
    """Bytes of every problem's inputs and outputs at its published sizes, on the meta device."""
    import importlib.util

    import torch

    def nbytes(x) -> int:
        if isinstance(x, torch.Tensor):
            return x.numel() * x.element_size()
        if isinstance(x, (list, tuple)):
            return sum(nbytes(y) for y in x)
        if isinstance(x, dict):
            return sum(nbytes(y) for y in x.values())
        return 0

    rows = []
    for path in sorted(directory.glob("level[123]/*.py")):
        row: dict = {"path": str(path.relative_to(directory)), "level": path.parent.name, "input_bytes": 0, "output_bytes": None}
        try:
            with torch.device("meta"):
                spec = importlib.util.spec_from_file_location(f"kb_{path.parent.name}_{path.stem}", path)
                module = importlib.util.module_from_spec(spec)
                spec.loader.exec_module(module)
                inputs = module.get_inputs()
                row["input_bytes"] = nbytes(inputs)
                model = module.Model(*module.get_init_inputs())
                with torch.no_grad():
                    row["output_bytes"] = nbytes(model(*inputs))
        except Exception as exc:  # noqa: BLE001 - sized by its inputs alone
            row["meta_error"] = f"{type(exc).__name__}: {exc}"[:200]
        rows.append(row)
    return rows


def largest(rows: list[dict], n: int) -> list[dict]:
    """The n largest by inputs + outputs (ties: the larger output first, then the name)."""
    key = lambda r: (-(r["input_bytes"] + (r["output_bytes"] or 0)), -(r["output_bytes"] or 0), r["path"])  # noqa: E731
    return sorted(rows, key=key)[:n]


def short(path: Path) -> str:
    """L1_87 for level1/87_conv_pointwise_2D.py."""
    return f"L{path.parent.name[-1]}_{path.stem.split('_')[0]}"


def run_kernelbench(args: argparse.Namespace) -> None:
    directory = args.kernelbench.resolve()
    if args.sizes and args.sizes.exists():
        rows = json.loads(args.sizes.read_text())
    else:
        rows = kernelbench_sizes(directory)
        if args.sizes:
            args.sizes.write_text(json.dumps(rows, indent=0))
    chosen = largest(rows, args.largest)
    if args.part:
        k, n = (int(x) for x in args.part.split("/"))
        chosen = chosen[k - 1::n]
    if args.names:  # these only, in this order
        by_name = {short(directory / r["path"]): r for r in chosen}
        chosen = [by_name[name] for name in args.names.split(",") if name in by_name]
    print(f"{len(chosen)} problems: " + ", ".join(short(directory / r["path"]) for r in chosen), flush=True)
    for size in chosen:
        path = directory / size["path"]
        started = time.monotonic()
        command = [sys.executable, __file__, "--one", str(path), "--candidate", args.candidate, "--device", args.device,
                   "--smi-index", SMI_INDEX]
        if args.tree:
            command += ["--tree", str(args.tree)]
        # a session of its own: on a timeout its workers go with it, not into the next problem's card
        proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
        try:
            out, err = proc.communicate(timeout=args.timeout)
            lines = [line for line in out.splitlines() if line.startswith("{")]
            row = json.loads(lines[-1]) if lines else {"problem": path.stem, "verdict": "benchmark-failed",
                                                        "rc": proc.returncode, "stderr": err[-3000:]}
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, 9)
            out, err = proc.communicate()
            row = {"problem": path.stem, "verdict": "benchmark-timeout", "stderr": err[-3000:]}
        row.update(name=short(path), meta_input_gib=size["input_bytes"] / GIB,
                   meta_output_gib=(size["output_bytes"] or 0) / GIB, wall=time.monotonic() - started)
        if args.jsonl:
            with open(args.jsonl, "a") as f:
                f.write(json.dumps(row, default=str) + "\n")
        p = row.get("peaks_gib") or {}
        print(f"{row['name']} {row['problem']}: {row['verdict']} | meta I {row['meta_input_gib']:.2f} O "
              f"{row['meta_output_gib']:.2f} GiB | peaks GiB: parent {p.get('parent', 0):.2f}, reference "
              f"{p.get('reference', 0):.2f}, candidate {p.get('candidate', 0):.2f}, card {p.get('card', 0):.2f} | "
              f"{row['wall']:.0f} s | {row.get('candidate', '')} | {str(row.get('message', ''))[:300]}", flush=True)
        if row["verdict"] not in ("ok",):
            for line in row.get("failed", []) + [str(row.get("stderr", ""))[-1500:]]:
                if line:
                    print("   ", line[:1500], flush=True)


def one(path: Path, kind: str, device: str) -> None:
    """--one: measure one problem in this process and print its row as one JSON line."""
    try:
        row = measure(path, kind=kind, device=device)
    except Exception as exc:  # noqa: BLE001 - an exception out of the evaluator is a finding: record it
        row = {"problem": path.stem, "verdict": "exception", "message": f"{type(exc).__name__}: {exc}",
               "traceback": traceback.format_exc()[-4000:]}
    print(json.dumps(row, default=str), flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("prefixes", nargs="*", default=list(DEFAULT))
    parser.add_argument("--json", type=Path)
    parser.add_argument("--tree", type=Path, help="evaluate with the tools/ of this checkout")
    parser.add_argument("--trace", action="store_true", help="print the parent's largest allocations and where")
    parser.add_argument("--kernelbench", type=Path, help="a KernelBench problem folder (level1/ to level3/)")
    parser.add_argument("--largest", type=int, default=20)
    parser.add_argument("--part", help="K/N: every N-th of the chosen problems, from the K-th")
    parser.add_argument("--names", help="L1_87,L1_45,...: of the chosen problems, these only, in this order")
    parser.add_argument("--sizes", type=Path, help="a JSON file of sizes to read (or to write, when missing)")
    parser.add_argument("--jsonl", type=Path, help="append one JSON line per problem")
    parser.add_argument("--candidate", choices=["draft", "model"], default="draft")
    parser.add_argument("--timeout", type=float, default=600, help="seconds per problem (--kernelbench)")
    parser.add_argument("--smi-index", help="the nvidia-smi index of the card (default: CUDA_VISIBLE_DEVICES's first)")
    parser.add_argument("--device", default="cuda:0", help="cpu: a dry run of the plumbing (no memory figures)")
    parser.add_argument("--one", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    global SMI_INDEX
    if args.smi_index:
        SMI_INDEX = args.smi_index
    if args.tree:
        sys.path.insert(0, str(args.tree.resolve()))
    if args.one:
        one(args.one, args.candidate, args.device)
        return
    if args.kernelbench:
        run_kernelbench(args)
        return
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
