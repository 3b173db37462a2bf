"""One evaluation in progress: what its steps found so far, handed from each step to the next.

The result record being filled (times, errors, checks passed: never its verdict, which only
tools/judge/verdict.py's decide() writes), and what later steps need of earlier ones: the
guard's scan, the files to install, the candidate's worker, the own-kernel launches and the
torch ops seen, the timing plan and the gaps after each timed call.
"""
from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from tools.processes.builds import NO_FILES, Files
from tools.record import Result, TimeStats

if TYPE_CHECKING:
    from tools.guard.scan import Scan
    from tools.judge.bench import Bench
    from tools.judge.exact import ExactJudge
    from tools.processes.process import WorkerProcess
    from tools.timing.plan import TimingPlan


@dataclass
class Evaluation:
    source: str
    result: Result
    scan: "Scan | None" = None  # the static guard's reading of the source (step static)
    files: Files = NO_FILES  # build products to install in the worker before its build
    worker: "WorkerProcess | None" = None  # the candidate's, this evaluation's alone
    launched: int | None = None  # the fewest own-kernel launches in any forward (trials, held-out)
    torch_ops: set[str] = field(default_factory=set)  # compute ops left to torch in any forward
    plan: "TimingPlan | None" = None  # the timing protocol's input pool and blocks
    # the worker's own timing, where the parent's clock read more and the record carries that instead
    # (tools/timing/clocks.py `paid_time`); the roofline judges what the candidate's process reported
    reported_time: TimeStats | None = None
    gaps: dict[str, list[float]] = field(default_factory=dict)  # per arm: sync time minus end event, per call
    exact: "ExactJudge | None" = None  # the float64-judged bound's state (tools/judge/exact.py), float32 problems

    def exact_for(self, bench: "Bench") -> "ExactJudge | None":
        """This evaluation's float64 judge, made on first use when the bench judges so."""
        if (bench.exact or bench.exact_sampled) and self.exact is None:
            from tools.judge.exact import ExactJudge

            assert bench.options.float64_bound is not None  # bench.exact(_sampled) says so
            self.exact = ExactJudge(bench.options.float64_bound)
        return self.exact

    @contextlib.contextmanager
    def phase(self, *names: str) -> Iterator[None]:
        """Add the seconds of the block to `result.phases[name]` for each name (a phase and, say, the
        step of it: "timing", "timing_clocks"), when it ends without raising."""
        t0 = time.monotonic()
        yield
        for name in names:
            self.result.phases[name] = round(self.result.phases.get(name, 0.0) + time.monotonic() - t0, 4)

    def saw_launches(self, count: int) -> None:
        self.launched = count if self.launched is None else min(self.launched, count)
