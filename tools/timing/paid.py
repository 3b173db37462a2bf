"""What the verdict pays for a candidate's time: the worker's median, or the parent's own clock
where that reads well above it (tools/timing/clocks.py decides when; docs/integrity.md)."""
from __future__ import annotations

from tools.record import TimeStats


def paid_time(reported: TimeStats, parent_ms: float) -> TimeStats:
    """The worker's timing moved up to the parent's time per call (its interval shifted with it):
    a median the candidate's process reported well below what the parent's clock saw is not paid,
    within the rule's allowance or not (an attacker on an H200 had a median forged 2.7x on a 7.5 us kernel
    pass the rule, inside its 5 us allowance; paid at the parent's clock it gains what back-to-back
    calls read below isolated ones, 0.7-1.0x on the two_clocks benchmark's honest kernels)."""
    shift = parent_ms - (reported.median_ms or 0.0)
    return TimeStats(measured=True, median_ms=parent_ms,
                     ci_low_ms=None if reported.ci_low_ms is None else reported.ci_low_ms + shift,
                     ci_high_ms=None if reported.ci_high_ms is None else reported.ci_high_ms + shift,
                     samples=reported.samples,
                     note=f"the parent's clock, {parent_ms:.4g} ms per call back to back, above the worker's median "
                          f"{reported.median_ms:.4g} ms (the worker's: {reported.note})")
