"""The bench: what the steps of an evaluation may use of their evaluator, and nothing more.

An `Evaluator` (tools/evaluate.py) owns processes, pools and caches; a step of the pipeline
(tools/pipeline.py) reads a `Bench`: the problem, the options, the seeds, the reference
worker and its outputs, the input distributions, the builds, the arena sizes and the lock that
guards what evaluations running at once share. One bench per evaluator, made when its reference
worker has described the problem.
"""
from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tools.judge.distributions import Distributions
from tools.judge.exact import WIDENING
from tools.options import EvalOptions
from tools.processes.builds import Builds
from tools.processes.feed import Set, feed
from tools.processes.process import WorkerProcess
from tools.processes.reference import Reference
from tools.problem import ProblemInfo
from tools.record import TimeStats

if TYPE_CHECKING:
    from tools.timing.floor import QuietPasses


@dataclass
class Bench:
    problem: ProblemInfo
    options: EvalOptions
    device: str  # resolved once, by the evaluator ("cuda:N" or "cpu")
    seeds: list[int]  # the secret seeds of the correctness trials
    reference: Reference  # the problem's own Model, in its worker (trusted; makes every input)
    # guards what evaluations running at once share: the reference worker, its output cache, the
    # distributions and the spare workers; timing holds it throughout (the eager arm is the reference)
    lock: threading.RLock
    distributions: Distributions
    builds: Builds
    environment: dict[str, Any]  # the device's (its L2 size; the key of cached baselines)
    cache_dir: Path  # what is measured once (torch.compile times, device ceilings) is kept below it
    copy_ms_per_byte: float | None  # the parent's own device-to-device copy, measured before any candidate
    take_worker: Callable[[], WorkerProcess]  # a started candidate worker, this evaluation's alone
    # the kernel families of one eager forward of the reference, profiled once (tools/timing/library.py)
    reference_kernel_families: frozenset[str] | None = None
    # eager timed on a quiet device: at open, before any candidate, and again when an evaluation's
    # interleaved eager arm read slower (tools/timing/quiet.py)
    quiet_eager: "TimeStats | None" = None
    # ... and the second clock's floor and noise with it (tools/timing/floor.py); why not, where unknown
    quiet_passes: "QuietPasses | None" = None
    quiet_floor_note: str | None = None
    # float64 on sampled rows: per batch size, which inputs are cut to the rows (tools/judge/exact_rows.py)
    row_plan: dict[int, Any] = field(default_factory=dict)
    # whether sets can be evaluated in float64 on the host where their rows do not judge an output, the
    # outputs rows judge on no distribution (tools/judge/exact_host.py; decided at open), and why not
    host_ok: bool = False
    host_paths: set[str] = field(default_factory=set)
    host_refused: str | None = None
    host_seconds: float = 0.0
    recheck_quiet: bool = False

    @property
    def timed(self) -> bool:
        """Whether this evaluation measures times (on a GPU, with timing switched on)."""
        return self.options.timing and self.device.startswith("cuda")

    def decide_distributions(self) -> None:
        """Decide every distribution of the rotation (which the problem allows, and how) before any
        candidate runs, on the trials' own seeds: a candidate's doing (its out-of-memory on the
        device, say) can then never make the reference look as if the problem did not allow one, for
        this or any later candidate of the evaluator."""
        from tools.judge.distributions import ROTATION

        for i in range(len(ROTATION)):
            self.distribution(i, self.seeds[i % len(self.seeds)])

    def decide_float64(self) -> None:
        """Try the reference's float64 evaluation at every size it will be asked for (the problem's,
        already tried by decide_distributions(); each held-out variant's; or sampled rows of the
        batch), before any candidate runs: where it fits now, an out-of-memory later is not the
        problem's size but the device's memory taken, a fault the evaluator retries and charges
        (tools/processes/reference.py, Float64Lost). Where it does not fit now, it is recorded as
        not fitting, as before."""
        if self.exact:
            for k in range(len(self.problem.variants)):
                self.reference_outputs(self.seeds[k % len(self.seeds)], f"variant:{k}", borrow=True)
        elif self.exact_sampled:
            from tools.judge.exact_rows import decide_host

            self.float64_rows(self.seeds[0])
            self.host_refused = decide_host(self)

    def float64_rows(self, seed: int) -> dict[str, Any]:
        """The reference in float64 on as many rows of the batch as a sample takes (the first ones,
        every input along the batch cut): what decide_float64() tries at open and the self-check
        (tools/selfcheck.py) tries again with no candidate. Its reply header."""
        from tools.judge.exact_rows import RowSample

        batch = self.output_batch
        rows = list(range(RowSample(self, {}).rows(batch)))
        with self.lock:
            header, _ = self.reference.checked(
                {"op": "wide", "seed": seed, "distribution": "problem", "rows": rows, "batch": batch,
                 "arena_cap": self.arena_cap(1, outputs_only=True) + 2 * self.problem.output_bytes},
                self.options.trial_timeout)
        return header

    @property
    def output_batch(self) -> int:
        """The leading size of the problem's first output (the batch that rows are drawn from)."""
        from tools.problem import leaves

        shapes = [o["shape"] for o in leaves(self.problem.outputs) if o.get("kind") == "tensor" and o.get("shape")]
        return int(shapes[0][0]) if shapes else 1

    def distribution(self, i: int, seed: int) -> str:
        """The input distribution of trial i (chosen on first use: tools/judge/distributions.py)."""
        with self.lock:
            return self.distributions.for_trial(i, seed, lambda s, d: self.reference_outputs(s, d, borrow=True))

    @property
    def deadline_s(self) -> float:
        """Seconds the parent may wait on one candidate's worker in all (tools/processes/allowance.py)."""
        from tools.processes.allowance import default_seconds

        if self.options.deadline_s is not None:
            return self.options.deadline_s
        return default_seconds(self.options.timing_budget_s, self.reference.forward_s, self.timed)

    @property
    def exact(self) -> bool:
        """Whether outputs are judged against the reference evaluated in float64 (tools/judge/exact.py)."""
        return self.exact_refused is None

    @property
    def exact_refused(self) -> str | None:
        """Why outputs are not judged against float64, or None: the bound switched off
        (`EvalOptions.float64_bound`), not a float32 (or, cast by --precision bf16|fp16, a half)
        problem, or float64 copies of the inputs, outputs and parameters over
        `EvalOptions.float64_max_mb`."""
        if self.options.float64_bound is None:
            return "switched off"
        widening = WIDENING.get(f"torch.{self.problem.dtype}")
        if widening is None:
            return f"a {self.problem.dtype} problem"
        need = widening * (self.problem.input_bytes + self.problem.output_bytes + self.problem.param_bytes)
        if need > self.options.float64_max_mb << 20:
            return (f"its float64 evaluation needs {need / 2**30:.1f} GiB for float64 inputs, outputs and "
                    f"parameters, over float64_max_mb ({self.options.float64_max_mb} MiB)")
        return None

    @property
    def exact_sampled(self) -> bool:
        """Whether outputs are judged against float64 on rows of the batch drawn after the candidate
        answers (tools/judge/exact_rows.py): a float32 problem whose whole float64 evaluation is over
        `EvalOptions.float64_max_mb`."""
        return self.options.float64_bound is not None and f"torch.{self.problem.dtype}" in WIDENING and not self.exact

    def reference_outputs(self, seed: int, dist: str, borrow: bool = False) -> Any:
        """[outputs, inputs after forward] of the reference (tools/processes/reference.py); with
        `borrow`, a set too large to keep is views into the reference worker's arena: the caller
        holds `lock` while it uses them (`trial_lock()` is that lock exactly when they are borrowed).
        For a float32 problem the same request evaluates the reference in float64: `reference_wide()`."""
        with self.lock:
            return self.reference.outputs_for(seed, dist, timeout=self.options.trial_timeout,
                                              arena_cap=self.arena_cap(2, dist=dist) + self._wide_bytes(dist),
                                              size=self.set_bytes(dist),
                                              keep_bytes=self.options.reference_cache_mb << 20, borrow=borrow,
                                              float64=self.exact)

    def reference_wide(self, seed: int, dist: str) -> tuple[Any, str | None]:
        """(the reference's outputs in float64, None) on (seed, distribution), or (None, why not):
        asked right after reference_outputs() of the same set, under the same lock when borrowed."""
        with self.lock:
            if (why := self.exact_refused) is not None:
                return None, why
            return self.reference.wide_for(seed, dist)

    def feed(self, worker: WorkerProcess, sets: list[Set],
             stamps: dict[str, float] | None = None) -> tuple[list[dict[str, Any]], bytes]:
        """Write input sets, made by the reference worker, into a candidate's (tools/processes/feed.py)."""
        cap = max((self.arena_cap(len(sets), inputs_only=True, dist=dist) for _, _, dist in sets),
                  default=self.arena_cap(len(sets), inputs_only=True))
        return feed(self.reference, worker, sets, device=self.device, arena_cap=cap,
                    timeout=self.options.trial_timeout, lock=self.lock, stamps=stamps)

    def set_bytes(self, dist: str) -> int:
        """Bytes of the reference's [outputs, inputs] on `dist` (a held-out variant's own)."""
        inputs, outputs = self.problem.input_bytes, self.problem.output_bytes
        if dist.startswith("variant:"):
            variant = self.problem.variants[int(dist.split(":")[1])]
            inputs, outputs = int(variant.get("input_bytes") or inputs), int(variant.get("output_bytes") or outputs)
        return inputs + outputs + self._wide_bytes(dist)

    def _wide_bytes(self, dist: str) -> int:
        """Bytes of the reference's float64 outputs on `dist` (twice its float32 ones), if asked for."""
        if not self.exact:
            return 0
        outputs = self.problem.output_bytes
        if dist.startswith("variant:"):
            outputs = int(self.problem.variants[int(dist.split(":")[1])].get("output_bytes") or outputs)
        return 2 * outputs

    def trial_lock(self, dist: str) -> contextlib.AbstractContextManager[Any]:
        """What a trial on `dist` holds from writing its inputs to comparing its outputs: the
        lock, when the reference's outputs are too large to keep and are read in place (borrowed)
        rather than copied beside the candidate's; nothing otherwise."""
        too_large = self.set_bytes(dist) > (self.options.reference_cache_mb << 20)  # as Reference.outputs_for
        return self.lock if too_large else contextlib.nullcontext()

    def arena_cap(self, copies: int, outputs_only: bool = False, inputs_only: bool = False,
                  dist: str = "problem") -> int:
        """Bytes a worker's arena may grow to for a reply holding `copies` times the
        reference's outputs (and inputs): room for honest answers, not for runaway ones. On a
        held-out variant's distribution ("variant:K"), the variant's when it took more (a
        larger variant: tools/worker/variant_bytes.py bounds it)."""
        return arena_cap(self.problem, copies, outputs_only=outputs_only, inputs_only=inputs_only, dist=dist)


def arena_cap(problem: ProblemInfo, copies: int, outputs_only: bool = False, inputs_only: bool = False,
              dist: str = "problem") -> int:
    """Bench.arena_cap, for the evaluator's own use before its bench exists."""
    inputs, outputs = problem.input_bytes, problem.output_bytes
    if dist.startswith("variant:"):
        variant = problem.variants[int(dist.split(":")[1])]
        inputs = max(inputs, int(variant.get("input_bytes") or 0))
        outputs = max(outputs, int(variant.get("output_bytes") or 0))
    size = (0 if inputs_only else outputs) + (0 if outputs_only else inputs)
    return copies * size + (64 << 20)


def reply_cap(problem: ProblemInfo, namespace_cap_bytes: int) -> int:
    """The largest reply a candidate's worker may send: its outputs and inputs of one trial
    (on the CPU they travel as bytes; a held-out variant's trial included), or what a build
    hands over. Known once the reference has described the problem."""
    trials = [arena_cap(problem, 2, dist=f"variant:{k}") for k in range(len(problem.variants))]
    return max(arena_cap(problem, 2), *trials, namespace_cap_bytes + (1 << 20))
