"""The second clock's floor, held to what a quiet device gives (issue 36).

A gated pass costs a fixed amount besides its calls (tools/timing/gate.py: the handshake and the
second context's first kernel, about 0.3 ms). The second clock subtracts it from the candidate's
passes, as the eager reference's passes of 1 and k calls give it (`pass_floor`). Those passes run
while the candidate's worker exists, and GPU work it leaves queued behind its own pass's DONE (a
spin from a finalizer, a second stream, a host thread) time-slices with them: the reference's
one-call pass reads long, the floor grows by as much, and so does what is subtracted from the
candidate's k-call pass. With k = 2 a true 5 ms per call reported as 0.1 ms passed that way
(docs/integrity.md, from the formulas).

So the floor is also measured on a quiet device, with eager's quiet time (tools/timing/quiet.py
`measure_floor`):
when the evaluator opens, before any candidate, and again whenever the quiet time is re-measured.
A pass's floor is then at most that plus FLOOR_SLACK_MS (`held`): work a candidate queues can
only lower what the parent subtracts, never raise it. The floor does not depend on k (it is what a
pass costs besides its calls), so the quiet one is measured at the k eager's quiet median gives.

The rule's noise term (tools/timing/clocks.py `Passes.noise`: how far an honest pass may wander,
from the spread of the reference's k-call passes) is read beside the candidate too, and is held the
same way (`held_noise`): at most the quiet passes' spread plus FLOOR_SLACK_MS, per call of the
fewer of the two passes' calls. A candidate that slows the reference's passes unevenly widens the
allowance of its own forged median by no more than a quiet device's jitter.
"""
from __future__ import annotations

from dataclasses import dataclass

# a pass's floor may exceed the quiet one by this much (ms): the spread of the fixed cost over a run
# on an H200 was within 0.01 ms per pass (docs/integrity.md), and what exceeds it here costs an
# honest candidate at most that / k per call, against the rule's 0.005 ms gap allowance per call
FLOOR_SLACK_MS = 0.001


@dataclass(frozen=True)
class QuietPasses:
    """The reference's gated passes on a quiet device (tools/timing/quiet.py `measure_floor`)."""
    floor_ms: float  # what a pass costs besides its calls (`pass_floor` of their minima)
    spread_ms: float  # the k-call passes' largest less smallest
    k: int  # calls per pass there (eager's quiet median gives it)


def pass_floor(one_ms: float, many_ms: float, k: int, eager_median_ms: float) -> float:
    """What a pass costs besides its calls, from the reference's passes of 1 and k calls (their
    minima): the one-call pass less the slope (eager's median where k = 1)."""
    slope = (many_ms - one_ms) / (k - 1) if k > 1 else eager_median_ms
    return max(0.0, one_ms - max(slope, 0.0))


def held(floor_ms: float, quiet: QuietPasses | None) -> float:
    """The floor a pass may subtract: the one measured beside the candidate, at most the quiet one
    plus FLOOR_SLACK_MS."""
    return floor_ms if quiet is None else min(floor_ms, quiet.floor_ms + FLOOR_SLACK_MS)


def held_noise(noise_per_call: float, quiet: QuietPasses | None, k: int) -> float:
    """The noise a k-call pass may be allowed per call: the one read beside the candidate, at most
    the quiet passes' spread plus FLOOR_SLACK_MS over the fewer of the two passes' calls (a pass's
    spread is mostly its fixed cost's, which does not grow with k)."""
    if quiet is None:
        return noise_per_call
    return min(noise_per_call, (quiet.spread_ms + FLOOR_SLACK_MS) / max(min(k, quiet.k), 1))
