"""The evaluation, in order: every step a candidate must clear, listed once, and the one call to
`decide` (tools/judge/verdict.py).

    static ─► cuda_build ─► worker ─► build ─► trials ─► heldout ─► integrity
        ─► own_kernel_share ─► blocks ─► one_stream ─► two_clocks ─► speedups ─► roofline

Each step reads the bench (tools/judge/bench.py) and the evaluation so far
(tools/judge/evaluation.py), and returns a `Failure` or nothing. The first failure ends the
evaluation and decides its verdict; `ok` needs every listed step to have returned nothing. A
step that does not apply (no GPU, timing off, a single-op problem's own-kernel share) returns
nothing after saying so in the record. The steps marked `exclusive` run as one stretch under the
bench's lock: timing drives the shared reference worker (the eager arm), and no other evaluation
may use it in between.

The candidate's worker dying, timing out or breaking the protocol in any step (WorkerGone) is that
step's failure. The reference worker's loss (ReferenceLost) and any other exception propagate: the
evaluator restarts the reference and evaluates again, or records its own fault (never `ok`).
"""
from __future__ import annotations

import contextlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from tools.judge import build, heldout, static, trials
from tools.judge.evaluation import Evaluation
from tools.judge.verdict import Failure, decide
from tools.processes.process import WorkerGone
from tools.record import Result, Verdict
from tools.timing import baselines, blocks, clocks, library

if TYPE_CHECKING:
    from tools.judge.bench import Bench


@dataclass(frozen=True)
class Step:
    name: str
    run: Callable[["Bench", Evaluation], Failure | None]
    exclusive: bool = False  # run under the bench's lock (with the exclusive steps next to it)


STEPS: tuple[Step, ...] = (
    Step("static", static.static),  # parse, "is this a candidate", the static guard
    Step("cuda_build", build.cuda_build),  # load_inline extensions, in a build sandbox without a GPU
    Step("worker", build.worker),  # the candidate's confined worker, ready
    Step("build", build.build),  # files installed, the module loaded, ModelNew built
    Step("trials", trials.trials),  # correctness on secret inputs of three distributions
    Step("heldout", heldout.heldout),  # the drop-in check: other sizes and constructor arguments
    Step("integrity", trials.integrity),  # own kernels launched in every forward; single-op rule
    Step("own_kernel_share", library.own_kernel_share),  # GPU time in own and in library kernels
    Step("blocks", blocks.blocks, exclusive=True),  # timed blocks, interleaved with eager, outputs verified
    Step("one_stream", blocks.one_stream, exclusive=True),  # no work left running after the end event
    Step("two_clocks", clocks.two_clocks, exclusive=True),  # the parent's own clock agrees with the worker's
    Step("speedups", baselines.speedups, exclusive=True),  # against eager and torch.compile
    Step("roofline", baselines.roofline, exclusive=True),  # faster than the hardware allows is impossible
)
REQUIRED = tuple(step.name for step in STEPS)  # what must clear for `ok`, whatever list is run


def run(bench: "Bench", evaluation: Evaluation, steps: Sequence[Step] = STEPS) -> Result:
    """Run `steps` in order until one fails; decide the verdict (against REQUIRED, always)."""
    cleared: list[str] = []
    failure: Failure | None = None
    with contextlib.ExitStack() as held:
        holding = False
        for step in steps:
            if step.exclusive and not holding:
                held.enter_context(bench.lock)
                holding = True
            elif holding and not step.exclusive:
                held.close()
                holding = False
            try:
                outcome = step.run(bench, evaluation)
            except WorkerGone as exc:
                outcome = Failure(Verdict(exc.verdict), exc.check, str(exc))
            if outcome is None:
                cleared.append(step.name)
                continue
            if not isinstance(outcome, Failure):
                raise TypeError(f"step {step.name} returned {type(outcome).__name__}, not a Failure or None")
            failure = outcome
            break
    return decide(evaluation.result, failure, cleared, REQUIRED)
