"""get_ncu_profile for an agent run: the evaluator's hardware counters of an attempt's source
(tools/counters/), at most `limit` calls per run, each on an evaluator no candidate is judged on.

Each call costs seconds of GPU time (Nsight Compute replays every kernel once per counter pass),
and it serializes the card's kernels: so a run allows few, and it takes its card's evaluator from
the run's judges (agent/loop/judges.py) as a candidate does, so no timing shares the card with it.
The count is the session's: a resumed run starts it again.
"""
from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Any

from agent.loop.judges import Judges


@dataclass
class CounterCalls:
    judges: Judges  # their evaluators: tools.Evaluator, or anything with counters(source) -> Counters
    limit: int
    used: int = 0
    _count: threading.Lock = field(default_factory=threading.Lock)

    def __call__(self, source: str) -> tuple[dict[str, Any] | None, str | None]:
        """(the counters' digest, None), or (None, why there are none)."""
        if getattr(self.judges.all[0], "counters", None) is None:
            return None, "this evaluator does not read hardware counters"
        with self._count:
            if self.used >= self.limit:
                return None, f"this run's {self.limit} get_ncu_profile calls are spent (max_counter_calls)"
            self.used += 1
        with self.judges.take() as evaluator:
            return evaluator.counters(source).as_dict(), None
