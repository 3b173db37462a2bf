"""The second clock on a GPU: for elementwise kernels from a few microseconds to about 10 ms, the
worker's median against the parent's own clock, for an honest candidate, a host-heavy honest one
(many small launches per call), a slow honest one (one program walks the array: far from the
roofline, so the roofline cannot catch a forged time), and, for both kernels, one whose worker
reports its times divided by a factor.

    python benchmarks/two_clocks.py [--sizes 14,18,22,26,28] [--factor 1.5] [--json OUT]
                                    [--candidates honest,slow_forged] [--repeat N]

It prints, per size and candidate, the worker's median, the parent's time per call back to back,
their ratio, the request overhead the eager arm showed, and the verdict under the rule in force
(tools/timing/clocks.py: RATIO, GAP_ALLOWANCE_MS); then, for each forged candidate (times divided by the
factor; `slow_early` also answers before its GPU work is done), the sizes at which it was refused
and by which check. The ratio parent / worker of the honest candidates is what RATIO and
GAP_ALLOWANCE_MS must stay above. Needs a CUDA GPU.
"""
from __future__ import annotations

import argparse
import json
import re
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

PROBLEM = '''
import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, x):
        return x * 2.0 + 1.0


def get_inputs():
    return [torch.randn({n})]


def get_init_inputs():
    return []
'''

KERNEL = '''
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def scale_add(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(y_ptr + offs, tl.load(x_ptr + offs, mask=mask) * 2.0 + 1.0, mask=mask)


@triton.jit
def touch(y_ptr, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    tl.store(y_ptr + offs, tl.load(y_ptr + offs))


@triton.jit
def scale_add_one_program(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    for start in range(0, n, BLOCK):  # one program walks the whole array: slow, honest
        offs = start + tl.arange(0, BLOCK)
        mask = offs < n
        tl.store(y_ptr + offs, tl.load(x_ptr + offs, mask=mask) * 2.0 + 1.0, mask=mask)


def launch(x):
    y = torch.empty_like(x)
    scale_add[(triton.cdiv(x.numel(), 1024),)](x, y, x.numel(), BLOCK=1024)
    return y


def launch_slow(x):
    y = torch.empty_like(x)
    scale_add_one_program[(1,)](x, y, x.numel(), BLOCK=1024)
    return y
'''
FORGE = '''
import sys


def forge():
    timing = sys.modules["tools.worker.timing"]
    real = timing._elapsed
    timing._elapsed = lambda a, b: real(a, b) / {factor}
'''

CANDIDATES = {
    "honest": KERNEL + '''
class ModelNew(nn.Module):
    def forward(self, x):
        return launch(x)
''',
    # eight extra launches per call that change nothing: launch overhead well above GPU time
    "host_heavy": KERNEL + '''
class ModelNew(nn.Module):
    def forward(self, x):
        y = launch(x)
        for _ in range(8):
            touch[(1,)](y, BLOCK=16)
        return y
''',
    # what native code could do in its own process: every time the worker reads is divided
    "forged": KERNEL + FORGE + '''
class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        forge()

    def forward(self, x):
        return launch(x)
''',
    # far from the roofline, so only the clocks can tell
    "slow": KERNEL + '''
class ModelNew(nn.Module):
    def forward(self, x):
        return launch_slow(x)
''',
    "slow_forged": KERNEL + FORGE + '''
class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        forge()

    def forward(self, x):
        return launch_slow(x)
''',
    # forged times, and a worker that answers before its GPU work is done (its synchronizations
    # are gone): the parent's copy of the outputs, taken at the reply, must hold the finished work
    "slow_early": KERNEL + FORGE + '''
class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        forge()
        timing = sys.modules["tools.worker.timing"]
        timing.synchronize = lambda device: None

    def forward(self, x):
        return launch_slow(x)
''',
}
# the forged candidate reaches into its worker as native code would; the Python-level filters
# (first filter only) are switched off so that only the clocks stand in its way
OPEN = frozenset({"import"})


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", default="12,14,16,18,20,22,24,26,28", help="log2 of the element counts")
    ap.add_argument("--factor", type=float, default=1.5)
    ap.add_argument("--json", type=Path)
    ap.add_argument("--candidates", default=",".join(CANDIDATES), help="comma-separated, of: " + ", ".join(CANDIDATES))
    ap.add_argument("--repeat", type=int, default=1, help="evaluators opened per size, one after another "
                    "(each as a batch run's fresh process per problem opens one)")
    args = ap.parse_args()
    names = [n for n in args.candidates.split(",") if n]
    unknown = sorted(set(names) - set(CANDIDATES))
    if unknown:
        ap.error(f"--candidates: unknown {', '.join(unknown)}")
    from tools.timing import clocks
    from tools.evaluate import EvalOptions, Evaluator

    rows = []
    work = Path(tempfile.mkdtemp(prefix="two-clocks-"))
    for log2 in (int(s) for s in args.sizes.split(",")):
        path = work / f"scale_add_{log2}.py"
        path.write_text(PROBLEM.format(n=1 << log2))
        options = EvalOptions(device="cuda:0", cache_dir=work / "cache", disabled_rules=OPEN, spares=1)
        for _ in range(args.repeat):
            with Evaluator(path, options) as ev:
                for name in names:
                    r = ev.evaluate(CANDIDATES[name].replace("{factor}", repr(args.factor)))
                    rows.append(row(log2, name, r))
                    print(json.dumps(rows[-1]), flush=True)
    print(f"\nrule: parent <= {clocks.RATIO} x worker + {clocks.GAP_ALLOWANCE_MS} ms + noise")
    print(f"{'size':>6} {'candidate':>11} {'worker ms':>10} {'parent ms':>10} {'ratio':>6} {'overhead':>9}  verdict")
    for x in rows:
        print(f"2^{x['log2']:<4} {x['candidate']:>11} {x['worker_ms'] or 0:>10.4g} {x['parent_ms'] or 0:>10.4g} "
              f"{x['ratio'] or 0:>6.3f} {x['overhead_ms'] or 0:>9.4g}  {x['verdict']} {x['rule']}")
        print(f"       {x['detail'].split('(allowed', 1)[-1]}")
    for name in ("forged", "slow_forged", "slow_early"):
        caught = [f"2^{x['log2']} ({x['worker_ms'] or 0:.3g} ms reported, {x['rule']})" for x in rows
                  if x["candidate"] == name and x["verdict"] != "ok"]
        print(f"{name} x{args.factor}: refused at {', '.join(caught) or 'no size'}")
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))


def row(log2: int, name: str, r) -> dict:
    check = next((c for c in r.checks if c.name == "timing:two-clocks"), None)
    found = re.search(r"parent's clock ([\d.e+-]+) ms .*?median ([\d.e+-]+) ms .*?overhead ([\d.e+-]+) ms",
                      check.detail if check else "")
    parent, worker, overhead = (float(g) for g in found.groups()) if found else (None, None, None)
    failed = next((c.name for c in r.checks if not c.passed), "")
    return {"log2": log2, "candidate": name, "verdict": r.verdict.value, "rule": failed,
            "worker_ms": worker, "parent_ms": parent, "overhead_ms": overhead,
            "ratio": parent / worker if parent and worker else None,
            "speedup": r.speedup_vs_eager, "detail": check.detail if check else (r.message or "")[:300]}


if __name__ == "__main__":
    main()
