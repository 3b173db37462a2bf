"""How far apart can two evaluations of the same kernel be? Fresh processes against one process.

    python benchmarks/process_spread.py [--processes 8] [--repeats 4] [--only NAME] [--json OUT]

Every evaluation times its candidate in a fresh worker process. This script separates what a
fresh process changes from sampling noise: for each case it times the same candidate and its
eager reference with the evaluator's own timed-call protocol (tools.worker.timing: rotating input pool sized as an evaluation's,
L2 flush, GPU preroll, CUDA events; blocks of calls alternating the two) in --processes fresh
processes, and --repeats times inside one process, each time with a new input pool. It prints
each process's median and the spread (max - min) / min across processes and within the one
process. A spread across processes well above the one within a process is an offset fixed for
a process's lifetime, which no number of samples in one evaluation can average away. Needs a
CUDA GPU.
"""
from __future__ import annotations

import argparse
import json
import random
import statistics
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(HERE))

from eval_speed import CASES, load  # noqa: E402  (the same problems and candidates as the speed benchmark)

CALLS = 256  # timed calls per arm and round
BLOCK = 16  # calls per block; blocks alternate the arms (ABBA)


def time_in_this_process(name: str, rounds: int, device: str) -> list[dict[str, float]]:
    """Median microseconds per arm for each round; each round times on a new input pool."""
    import torch

    from tools.worker.inputs import generate, tensor_bytes
    from tools.timing.interleave import block_order
    from tools.timing.plan import pool_slots
    from tools.worker.timing import InputPool, Timer

    problem, candidate = CASES[name]
    ref_mod, cand_mod = load(problem, "problem"), load(candidate, "candidate")
    dev = torch.device(device)
    torch.manual_seed(0)
    arms = {"candidate": cand_mod.ModelNew(*ref_mod.get_init_inputs()).to(dev),
            "eager": ref_mod.Model(*ref_mod.get_init_inputs()).to(dev)}
    l2 = torch.cuda.get_device_properties(dev).L2_cache_size
    timer = Timer(dev, l2)
    slots = pool_slots(l2, tensor_bytes(generate(ref_mod.get_inputs, 0, "problem", dev)))  # as an evaluation's plan
    for fn in arms.values():
        timer.warm_up(fn, generate(ref_mod.get_inputs, 1, "problem", dev))
    kept, results = [], []
    for _ in range(rounds):
        pool = InputPool(lambda seed: generate(ref_mod.get_inputs, seed, "problem", dev))
        kept.append(pool)  # held, so the next round's pool lands elsewhere
        samples: dict[str, list[float]] = {arm: [] for arm in arms}
        for block in range(CALLS // BLOCK):
            for arm in block_order(block, tuple(arms)):
                held = []
                for i in range(BLOCK):
                    n = block * BLOCK + i
                    slot, rotation = n % slots, n // slots
                    inputs = pool.get(slot, random.Random(f"{rotation}:{slot}").getrandbits(62))
                    ms, _, out = timer.time_call(arms[arm], inputs)
                    held.append(out)  # outputs live through the block, as in an evaluation
                    samples[arm].append(ms * 1000.0)
        results.append({arm: statistics.median(xs) for arm, xs in samples.items()})
    return results


def spread(values: list[float]) -> float:
    return (max(values) - min(values)) / min(values)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--processes", type=int, default=8)
    parser.add_argument("--repeats", type=int, default=4)
    parser.add_argument("--only", action="append", choices=sorted(CASES))
    parser.add_argument("--device", default="cuda:0")
    parser.add_argument("--json", type=Path)
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--rounds", type=int, default=1, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(time_in_this_process(args.child, args.rounds, args.device)))
        return
    report = {}
    print(f"{'case':<12} {'arm':<9} {'fresh processes: medians (us)':<58} {'spread':>7} {'one process':>11}")
    for name in args.only or ["swish_scale", "row_softmax", "matmul_fp16"]:
        def child(rounds: int) -> list[dict[str, float]]:
            out = subprocess.run([sys.executable, __file__, "--child", name, "--rounds", str(rounds), "--device", args.device],
                                 capture_output=True, text=True, check=True)
            return json.loads(out.stdout.strip().splitlines()[-1])

        fresh = [child(1)[0] for _ in range(args.processes)]
        within = child(args.repeats)
        report[name] = {"fresh": fresh, "within": within}
        for arm in ("candidate", "eager"):
            medians = [r[arm] for r in fresh]
            shown = " ".join(f"{m:.3f}" for m in medians)
            print(f"{name:<12} {arm:<9} {shown:<58} {spread(medians):>7.2%} {spread([r[arm] for r in within]):>11.2%}", flush=True)
    if args.json:
        args.json.write_text(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
