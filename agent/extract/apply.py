"""`ratchet apply`'s work: each problem of an extraction's manifest mapped to its kept kernel, the
patched model checked against the original with the float64-judged bound, both timed, and the
end-to-end speedup set next to the manifest's estimate.

The check: the original model evaluated in float64 on the same inputs is the truth; the patched
model's error against it (norm of the difference, per output) may be at most 8x eager's own (in
the run's precision: float32, or the half type of --precision bf16|fp16) plus 4 float32 ulps of
the output's norm, the evaluator's norm rule (docs/precision.md). Only kernels judged under the
same precision are applied.
"""
from __future__ import annotations

import copy
import statistics
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agent.extract.manifest import Manifest, Problem

NORM_MULTIPLE = 8.0
ULPS = 4.0


@dataclass
class Kept:
    """One problem's outcome: its kept kernel, or why it is left as it was."""

    problem: Problem
    kernel: str | None = None  # the kernel file's name in the recipe's kernels/
    source: str = ""
    attempt: int | None = None
    speedup: float | None = None  # the kept attempt's speedup vs eager, where timed
    why: str = ""  # why nothing is applied


@dataclass
class Outcome:
    kept: list[Kept]
    correct: bool
    error_ratio: float  # the patched model's float64 error / the bound (worst output)
    eager_ms: float | None = None
    patched_ms: float | None = None
    compile_ms: float | None = None
    estimate: float | None = None  # from the manifest's shares and the kept speedups
    notes: list[str] = field(default_factory=list)
    precision: str = "fp32"

    @property
    def speedup(self) -> float | None:
        return self.eager_ms / self.patched_ms if self.eager_ms and self.patched_ms else None


def kept_kernels(manifest: Manifest, folder: Path, workspace: str | None, precision: str = "fp32") -> list[Kept]:
    """Each problem's best attempt in its workspace (found by the problem file, as `ratchet best`),
    when it was judged under `precision` (a bfloat16 model takes no kernel judged in float32)."""
    from agent.loop.kept_eager import kept_eager
    from agent.workspace.repo import WorkspaceError
    from agent.workspace.root import Workspace, resolve_root

    root = Workspace(resolve_root(workspace))
    found = []
    for problem in manifest.problems:
        kept = Kept(problem)
        found.append(kept)
        try:
            with root.open_existing(folder / problem.file) as repo:
                attempt = repo.best()
                if attempt is None:
                    kept.why = "no correct attempt"
                    continue
                record = repo.record(attempt)
                if attempt.precision and attempt.precision != precision:
                    kept.why = f"attempt {attempt.number} was judged under {attempt.precision}, not {precision}"
                    continue
                if kept_eager(attempt, record):
                    kept.why = f"kept eager: attempt {attempt.number} is not faster than PyTorch"
                    continue
                kept.source, kept.attempt, kept.speedup = repo.source(attempt), attempt.number, attempt.speedup_vs_eager
                kept.kernel = problem.file
        except WorkspaceError as exc:
            kept.why = str(exc)  # "no workspace for <problem> under <root>", or what is wrong with it
    return found


def init_args(folder: Path, problem: Problem) -> list[Any]:
    """The problem file's own get_init_inputs() (the arguments its ModelNew was judged with)."""
    namespace: dict[str, Any] = {"__name__": "ratchet_extracted"}
    path = folder / problem.file
    exec(compile(path.read_text(), str(path), "exec"), namespace)  # noqa: S102 - written by ratchet extract
    return list(namespace["get_init_inputs"]())


def estimate(kept: list[Kept]) -> float | None:
    """Amdahl's law over the manifest's shares: 1 / (rest + sum(share / speedup)); None when no kept
    kernel was timed."""
    timed = [k for k in kept if k.kernel and k.speedup]
    if not timed:
        return None
    covered = sum(k.problem.share for k in timed)
    return 1.0 / ((1.0 - covered) + sum(k.problem.share / (k.speedup or 1.0) for k in timed))


def _outputs(value: Any) -> list[Any]:
    import torch

    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, (list, tuple)):
        return [t for v in value for t in _outputs(v)]
    if isinstance(value, dict):
        return [t for v in value.values() for t in _outputs(v)]
    return []


def check(original: Any, patched: Any, inputs: list[Any]) -> float:
    """The worst ratio, over the outputs, of the patched model's float64 error to the bound
    (<= 1: correct)."""
    import torch

    from tools.judge.exact import floor_eps

    exact = copy.deepcopy(original).double()
    cast = [x.double() if isinstance(x, torch.Tensor) and x.is_floating_point() else x for x in inputs]
    with torch.no_grad():
        truth, eager, mine = _outputs(exact(*cast)), _outputs(original(*inputs)), _outputs(patched(*inputs))
    if len(mine) != len(truth) or any(m.shape != t.shape for m, t in zip(mine, truth)):
        return float("inf")
    worst = 0.0
    for t, e, m in zip(truth, eager, mine):
        if not t.is_floating_point():
            worst = max(worst, 0.0 if torch.equal(m.to(t.dtype), t) else float("inf"))
            continue
        scale = float(t.norm())
        bound = NORM_MULTIPLE * float((e.double() - t).norm()) + ULPS * floor_eps(e.dtype) * scale
        err = float((m.double() - t).norm())
        worst = max(worst, err / bound if bound > 0 else (0.0 if err == 0 else float("inf")))
    return worst


def time_ms(model: Any, inputs: list[Any], device: str, calls: int = 20) -> float:
    """Median milliseconds of one forward after warm-up (CUDA events on a GPU)."""
    import torch

    samples = []
    with torch.no_grad():
        for _ in range(3):
            model(*inputs)
        for _ in range(calls):
            if device.startswith("cuda"):
                start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                start.record()
                model(*inputs)
                end.record()
                torch.cuda.synchronize()
                samples.append(start.elapsed_time(end))
            else:
                t0 = time.perf_counter()
                model(*inputs)
                samples.append((time.perf_counter() - t0) * 1000)
    return statistics.median(samples)
