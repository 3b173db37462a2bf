"""The whole evaluation's deadline, as the candidate's share of it: the seconds the parent may
wait, in all, on the replies of one candidate's worker (its build, trials, held-out trials, timed
blocks and passes). A worker that stalls each request just under that request's own timeout used
to hold an evaluation for minutes; with an allowance, a request's timeout is what is left of it,
and the request that runs past it ends the evaluation as `timeout` (check `deadline`), the
worker's process group killed (tools/processes/process.py).

Only the time spent waiting on the candidate counts: waiting for the evaluator's lock (other
evaluations timing on the same reference) or for the reference's own work is not the candidate's
doing. The seconds come from `EvalOptions.deadline_s`, or are scaled to the problem's own cost
(`default_seconds`).
"""
from __future__ import annotations

from dataclasses import dataclass

BASE_S = 60.0  # the candidate's imports, its first JIT compilations (an autotuned kernel's many) and start-up
PER_BUDGET = 4  # ... plus this many times the timing budget (the timed blocks and the back-to-back passes)
PER_FORWARD = 60  # ... plus this many of the reference's own forward passes (the trials' feeds and calls)


@dataclass
class Allowance:
    seconds: float
    spent: float = 0.0

    def left(self) -> float:
        return max(self.seconds - self.spent, 0.0)


def default_seconds(timing_budget_s: float, forward_s: float, timed: bool) -> float:
    """The candidate's allowance where `EvalOptions.deadline_s` does not set it: BASE_S, the timing
    (when timed) and PER_FORWARD times the reference's slowest forward pass measured at open."""
    return BASE_S + (PER_BUDGET * timing_budget_s if timed else 0.0) + PER_FORWARD * max(forward_s, 0.0)
