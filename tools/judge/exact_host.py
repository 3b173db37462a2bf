"""The float64-judged bound on a sample of elements evaluated in host memory, for a float32 problem
whose float64 evaluation does not fit on the device (over `EvalOptions.float64_max_mb`) and whose
rows cannot be judged alone (tools/judge/exact_rows.py: a batch norm in training mode, a column
mean, an output with no batch), docs/precision.md.

The reference worker evaluates the whole set in float64 on the host (a float64 copy of the model
in host memory, the set's inputs copied there and widened) and returns, of each output, the
HOST_SAMPLE elements the parent's secret seed names (tools/wire/positions.py). The parent draws the
seed after the candidate answered and takes the same elements of the candidate's and eager's
outputs; they are held to the bound like a whole output (an output of fewer than POOL_BELOW
elements, a loss, whole, its errors pooled over the trials as in tools/judge/exact.py).

Which sets: every trial whose rows do not judge an output (found at open for every distribution,
bench.host_paths, or rows that mix on the set itself), and one timed call drawn uniformly from those
the timed judge sampled (tools/timing/timed_exact.py), evaluated when the timing ends. Whether a
host evaluation is possible, and what it costs, is decided when the evaluator opens, before any
candidate (Bench.decide_float64): there it must fit `EvalOptions.float64_host_mb`, take at most
HOST_MAX_S and agree with eager; any failure later is then a fault of the machine's state
(tools/processes/reference.py, Float64Lost), never a reason to skip judging.
"""
from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from tools.judge.exact import EXACT_DTYPES, tree_tensors
from tools.problem import leaves
from tools.processes.reference import clone_tree
from tools.wire.positions import positions

if TYPE_CHECKING:  # the bench is not imported (`Any`): its modules import this one
    from tools.judge.exact import ExactJudge

HOST_SAMPLE = 1 << 20  # elements of each output judged per host-evaluated set
HOST_MAX_S = 60.0  # seconds one host float64 evaluation may take at open, or it is not used
HOST_AGREES = 1e-3  # eager's relative error against the host evaluation at open, at most, or it is not used
# host bytes a float64 evaluation takes, as a multiple of the float32 problem's inputs, outputs and
# parameters: twice for float64, and the model's intermediates
HOST_FACTOR = 6
# one host evaluation at a time in this process: evaluators side by side (a reward's problems, a
# batch's slots) would each take their allowance of host memory and share the cores
HOST_ONE_AT_A_TIME = threading.Lock()


def host_timeout(bench: Any) -> float:
    """Seconds the parent waits for a host evaluation after open: room for a loaded machine."""
    return max(bench.options.trial_timeout, 5 * bench.host_seconds, 300.0)


def host_refused(bench: Any) -> str | None:
    """Why the host float64 evaluation is not tried for this problem, or None."""
    problem = bench.problem
    need_mb = HOST_FACTOR * (problem.input_bytes + problem.output_bytes + problem.param_bytes) >> 20
    limit = bench.options.float64_host_mb or 0  # resolved: an int (tools/options.py)
    if limit <= 0:
        return "switched off (EvalOptions.float64_host_mb is 0, or the host's memory could not be read)"
    if need_mb > limit:
        return (f"a float64 evaluation on the host would take about {need_mb} MiB, over the {limit} MiB "
                "allowed (EvalOptions.float64_host_mb)")
    return None


@dataclass
class HostTake:
    """The elements of eager's and the candidate's outputs a host evaluation will be held against,
    copied out (before any request to the reference worker reuses its arena)."""

    seed: int  # the positions' seed, drawn after the candidate answered
    taken: list[tuple[str, Any, Any]]  # (output path, eager's elements, the candidate's)


def take(bench: Any, judge: "ExactJudge", r32: Any, cand: Any, paths: set[str] | None) -> HostTake:
    """Copy out the sampled elements (all of a small output's) of the floating outputs named by
    `paths` (None: every one). `r32` and `cand` may be views into the workers' arenas."""
    import torch

    seed = judge.random(bench).getrandbits(62)
    outs = dict(tree_tensors(cand))
    taken: list[tuple[str, Any, Any]] = []
    for leaf, (path, ref) in enumerate(tree_tensors(r32)):
        out = outs.get(path)
        if (paths is not None and path not in paths) or str(ref.dtype) not in EXACT_DTYPES or out is None \
                or out.shape != ref.shape:
            continue
        index = positions(ref.numel(), HOST_SAMPLE, seed, leaf).to(ref.device)
        # torch.take reads logical row-major positions whatever the strides: no copy of a transposed output
        taken.append((path, torch.take(ref, index), torch.take(out.to(ref.device), index)))
    return HostTake(seed, taken)


def judge_host(bench: Any, judge: "ExactJudge", key: str, source: dict[str, Any], took: HostTake,
               timeout: float | None = None, where: str = "") -> str | None:
    """Why the candidate's sampled elements are outside the bound against the host float64
    evaluation of the set `source` names (naming the output), or None. `timeout`: the pipe's
    deadline (default host_timeout()); `where`: the set, as the record's skipped entries name it."""
    import torch

    if not took.taken:
        return None
    with bench.lock, HOST_ONE_AT_A_TIME:  # the reference worker is one pipe (re-entrant)
        header, payload = bench.reference.checked(
            {"op": "wide", **source, "host": True, "positions_seed": took.seed, "count": HOST_SAMPLE,
             "arena_cap": 16 * HOST_SAMPLE * max(1, len(list(leaves(bench.problem.outputs)))) + (64 << 20)},
            timeout if timeout is not None else host_timeout(bench))
        if header.get("float64_skipped"):
            for path, *_ in took.taken:
                judge.skipped[f"{path} ({where})" if where else path] = f"host float64: {header['float64_skipped']}"
            return None
        sample = clone_tree(bench.reference.outputs(header, payload)[0])
    wide = dict(tree_tensors(sample))
    for path, ref_s, out_s in took.taken:
        twin = wide.get(path)
        if not isinstance(twin, torch.Tensor) or twin.shape != ref_s.shape:
            judge.skipped[f"{path} ({where})" if where else path] = "the host float64 evaluation does not give it at its shape"
            continue
        judge.skipped.pop(f"{path} ({where})" if where else path, None)
        judge.host_sets += 1
        if (why := judge.observe_one(key, path, twin.to(ref_s.device), ref_s, out_s)) is not None:
            return (f"{why} (on {ref_s.numel()} elements sampled after the candidate answered, from a float64 "
                    "evaluation on the host)")
    return None
