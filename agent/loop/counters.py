"""get_ncu_profile for an agent run: the evaluator's hardware counters of an attempt's source
(tools/counters/), at most `limit` calls per run, each while no branch of a wide step is judged.

Each call costs seconds of GPU time (Nsight Compute replays every kernel once per counter pass),
and it serializes the card's kernels: so a run allows few, and a wide step's timing never shares
the card with it (the session's `judging` lock). The count is the session's: a resumed run starts
it again.
"""
from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Any


@dataclass
class CounterCalls:
    evaluator: Any  # tools.Evaluator, or anything with counters(source) -> Counters
    limit: int
    judging: threading.Lock
    used: int = 0
    _count: threading.Lock = field(default_factory=threading.Lock)

    def __call__(self, source: str) -> tuple[dict[str, Any] | None, str | None]:
        """(the counters' digest, None), or (None, why there are none)."""
        counters = getattr(self.evaluator, "counters", None)
        if counters is None:
            return None, "this evaluator does not read hardware counters"
        with self._count:
            if self.used >= self.limit:
                return None, f"this run's {self.limit} get_ncu_profile calls are spent (max_counter_calls)"
            self.used += 1
        with self.judging:
            return counters(source).as_dict(), None
