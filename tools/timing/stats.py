"""Timing statistics: the median with a distribution-free interval, the stopping rule, speedups.

Kernel timings are skewed (a floor set by the hardware, a long tail of preemptions, clock
changes and interrupts), so the summary is the median and its interval comes from order
statistics, which assume nothing about the distribution beyond independent samples.

Interval method. Sort the n samples x(1) <= ... <= x(n). The number B of samples below the
true median is Binomial(n, 1/2), so the interval [x(k), x(n+1-k)] covers the median with
probability at least 1 - 2 * P(B <= k-1). We take the largest k (the narrowest symmetric
interval) whose coverage is still >= the confidence asked for:

- n <= EXACT_MAX_N: P(B <= j) is summed exactly with integer binomial coefficients;
- larger n: the normal approximation of the binomial, k = floor((n - z * sqrt(n)) / 2),
  z the two-sided normal quantile (1.96 for 95%); it is within one rank of the exact answer;
- n so small that even [min, max] covers less than asked (n <= 5 for 95%): [min, max], the
  widest interval the data allow.

Because B is discrete, the exact coverage is at least the confidence (slightly above it).
"""
from __future__ import annotations

import bisect
import functools
import math
import statistics
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Literal

from tools.record import TimeStats

StopReason = Literal["converged", "budget", "max_samples"]

EXACT_MAX_N = 1000
# A fresh worker process times a kernel with an offset of its own that lasts as long as the
# process and that no interval from one evaluation contains: up to ~0.2 us apart between fresh
# processes on an H200, whatever the kernel's length (benchmarks/process_spread.py; docs/evaluator.md).
PROCESS_OFFSET_MS = 0.0002


@functools.lru_cache(maxsize=4096)
def order_statistic_rank(n: int, confidence: float = 0.95) -> int:
    """The 1-based rank k such that [x(k), x(n+1-k)] is the median's interval (1 if none fits)."""
    if n < 1:
        raise ValueError("need at least one sample")
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence must lie in (0, 1), got {confidence}")
    if n > EXACT_MAX_N:
        z = statistics.NormalDist().inv_cdf((1.0 + confidence) / 2.0)
        return max(1, math.floor((n - z * math.sqrt(n)) / 2.0))
    total = 2**n
    allowed = (1.0 - confidence) / 2.0  # the tail each side may hold
    k = 1
    tail = 1  # 2^n * P(B <= k-1) = sum of C(n, i) for i < k
    coef = n  # C(n, k)
    # Grow k while the next interval [x(k+1), x(n-k)] still covers enough.
    while k + 1 <= (n + 1) // 2:
        next_tail = tail + coef  # 2^n * P(B <= k)
        if next_tail / total > allowed:
            break
        tail = next_tail
        coef = coef * (n - k) // (k + 1)  # C(n, k + 1)
        k += 1
    return k


def coverage(n: int, k: int) -> float:
    """Exact probability that [x(k), x(n+1-k)] covers the median of a continuous distribution."""
    tail = sum(math.comb(n, i) for i in range(k))
    return 1.0 - (2 * tail) / 2**n


def median_ci(samples: Sequence[float], confidence: float = 0.95) -> tuple[float, float, float]:
    """(median, low, high): the sample median and its distribution-free interval (see module doc)."""
    if not all(math.isfinite(x) for x in samples):
        raise ValueError("samples must be finite")
    return _median_ci_sorted(sorted(samples), confidence)


def _median_ci_sorted(xs: Sequence[float], confidence: float) -> tuple[float, float, float]:
    n = len(xs)
    if n == 0:
        raise ValueError("median_ci needs at least one sample")
    k = order_statistic_rank(n, confidence)
    mid = n // 2
    median = xs[mid] if n % 2 else (xs[mid - 1] + xs[mid]) / 2.0
    return median, xs[k - 1], xs[n - k]


@dataclass
class SampleCollector:
    """Collects timing samples (ms) and says when to stop.

    Stopping rule, checked in this order:
    - "converged": at least `min_samples` are in and the interval of the median lies within
      +-`rel_precision` of the median (max(median - low, high - median) <= rel_precision * median);
    - "max_samples": `max_samples` are in;
    - "budget": the measured time (the sum of the samples, plus any `overhead_s` charged with
      them) reached `budget_s`. The budget stops collection even below `min_samples`: a
      one-second kernel must not cost a minute. The note of the record then says so.
    """

    min_samples: int = 30
    rel_precision: float = 0.01
    confidence: float = 0.95
    max_samples: int = 1000
    budget_s: float | None = 10.0
    samples: list[float] = field(default_factory=list, init=False, repr=False)  # arrival order
    spent_s: float = field(default=0.0, init=False)
    forced_reason: StopReason | None = field(default=None, init=False)
    _sorted: list[float] = field(default_factory=list, init=False, repr=False)

    def __post_init__(self) -> None:
        if self.min_samples < 1 or self.max_samples < 1:
            raise ValueError("min_samples and max_samples must be at least 1")
        if self.rel_precision <= 0:
            raise ValueError("rel_precision must be positive")

    def add(self, sample_ms: float, overhead_s: float = 0.0) -> None:
        """Record one timed call; `overhead_s` charges untimed work (flush, sync) to the budget."""
        if not math.isfinite(sample_ms) or sample_ms < 0:
            raise ValueError(f"a timing sample must be finite and >= 0, got {sample_ms}")
        self.samples.append(sample_ms)
        bisect.insort(self._sorted, sample_ms)
        self.spent_s += sample_ms / 1000.0 + overhead_s

    def extend(self, samples_ms: Iterable[float]) -> None:
        for s in samples_ms:
            self.add(s)

    @property
    def n(self) -> int:
        return len(self.samples)

    def summary(self) -> tuple[float, float, float]:
        """(median, low, high) of what has been collected."""
        return _median_ci_sorted(self._sorted, self.confidence)

    def half_width_rel(self) -> float:
        """The interval's larger half-width relative to the median (inf when undefined)."""
        if not self._sorted:
            return math.inf
        median, low, high = self.summary()
        if median <= 0:
            return math.inf
        return max(median - low, high - median) / median

    def converged(self) -> bool:
        return self.n >= self.min_samples and self.half_width_rel() <= self.rel_precision

    def limit_reason(self) -> StopReason | None:
        """The hard limit reached ("max_samples" or "budget"), converged or not."""
        if self.n >= self.max_samples:
            return "max_samples"
        if self.budget_s is not None and self.spent_s >= self.budget_s:
            return "budget"
        return None

    @property
    def reason(self) -> StopReason | None:
        """Why collection stops now, or None while it should go on."""
        if self.converged():
            return "converged"
        return self.forced_reason or self.limit_reason()

    def done(self) -> bool:
        return self.reason is not None

    def stop(self, reason: StopReason) -> None:
        """Stop from outside (a partner arm spent the shared budget); kept as the reason."""
        self.forced_reason = reason

    def to_time_stats(self) -> TimeStats:
        return to_time_stats(self)


def to_time_stats(collector: SampleCollector) -> TimeStats:
    """The record's TimeStats for what `collector` holds, its note saying why it stopped."""
    if collector.n == 0:
        return TimeStats(measured=False, samples=0, note="no samples were taken")
    median, low, high = collector.summary()
    pct = collector.confidence * 100
    spread = collector.half_width_rel() * 100
    reason = collector.reason or "stopped early"
    note = f"{reason}: {pct:g}% interval of the median within +-{spread:.2f}% after {collector.n} samples"
    if collector.n < collector.min_samples:
        note += f" (fewer than the {collector.min_samples} wanted)"
    return TimeStats(
        measured=True, median_ms=median, ci_low_ms=low, ci_high_ms=high, samples=collector.n, note=note
    )


def _checked(stats: TimeStats, what: str) -> TimeStats:
    if not stats.measured or stats.median_ms is None or stats.median_ms <= 0:
        raise ValueError(f"{what} time is not measured (or not positive): {stats.note}")
    return stats


def speedup(baseline: TimeStats, candidate: TimeStats) -> float:
    """baseline median / candidate median: above 1 means the candidate is faster."""
    b, c = _checked(baseline, "baseline"), _checked(candidate, "candidate")
    return b.median_ms / c.median_ms  # type: ignore[operator]


def below_beyond_offset(high_ms: float, low_ms: float) -> bool:
    """Whether an interval ending at `high_ms` lies below one starting at `low_ms` by more than a
    fresh process's own offset: the one rule for "faster beyond noise" (NaN: never)."""
    return high_ms + PROCESS_OFFSET_MS < low_ms
