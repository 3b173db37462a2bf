"""The median's interval, the stopping rule, speedups and the interleaved schedule."""
from __future__ import annotations

import math
import random
from collections import Counter

import pytest

from tools.timing.interleave import block_order
from tools.record import TimeStats
from tools.timing.stats import (
    SampleCollector,
    below_beyond_offset,
    coverage,
    median_ci,
    order_statistic_rank,
    speedup,
    to_time_stats,
)

# ------------------------------------------------------------------------------- median_ci


def test_tiny_samples_give_the_full_range():
    assert median_ci([3.0]) == (3.0, 3.0, 3.0)
    assert median_ci([2.0, 1.0]) == (1.5, 1.0, 2.0)
    assert median_ci([5.0, 1.0, 4.0, 2.0, 3.0]) == (3.0, 1.0, 5.0)  # n=5: even [min, max] is < 95%


@pytest.mark.parametrize(
    "n, k",
    [(6, 1), (8, 1), (9, 2), (10, 2), (20, 6), (30, 10), (100, 40)],  # textbook binomial ranks
)
def test_exact_ranks_match_binomial_tables(n, k):
    assert order_statistic_rank(n) == k
    assert coverage(n, k) >= 0.95
    assert coverage(n, k + 1) < 0.95  # and it is the narrowest such interval


def test_interval_uses_the_order_statistics():
    xs = [float(v) for v in range(20, 0, -1)]  # 20..1, unsorted
    median, low, high = median_ci(xs)
    assert (median, low, high) == (10.5, 6.0, 15.0)


def test_normal_approximation_joins_the_exact_ranks():
    for n in (1001, 1500, 4000):
        k = order_statistic_rank(n)
        assert coverage(n, k) >= 0.95
        assert coverage(n, k + 2) < 0.95  # within one rank of the exact answer


def test_other_confidence_levels():
    assert order_statistic_rank(100, 0.90) > order_statistic_rank(100, 0.95) > order_statistic_rank(100, 0.99)
    with pytest.raises(ValueError):
        median_ci([1.0], confidence=1.0)
    with pytest.raises(ValueError):
        median_ci([])


@pytest.mark.parametrize("n, reps", [(10, 4000), (40, 3000), (1200, 600)])
def test_coverage_by_simulation(n, reps):
    """The interval covers a skewed distribution's true median as often as the binomial says."""
    rng = random.Random(1234 + n)
    true_median = math.log(2.0)  # exponential(1)
    hits = 0
    for _ in range(reps):
        lo_hi = median_ci([rng.expovariate(1.0) for _ in range(n)])
        hits += lo_hi[1] <= true_median <= lo_hi[2]
    expected = coverage(n, order_statistic_rank(n))
    se = math.sqrt(expected * (1 - expected) / reps)
    assert 0.95 <= expected < 0.985  # neither under-covering nor a uselessly wide interval
    assert abs(hits / reps - expected) < 4 * se


# ------------------------------------------------------------------------------ collector


def test_collector_converges_only_after_min_samples():
    c = SampleCollector(min_samples=30, rel_precision=0.01, budget_s=None)
    for i in range(29):
        c.add(1.0 + 0.001 * (i % 3))
        assert not c.done()
    c.add(1.0)
    assert c.done() and c.reason == "converged"
    stats = c.to_time_stats()
    assert stats.measured and stats.samples == 30
    assert stats.ci_low_ms <= stats.median_ms <= stats.ci_high_ms
    assert stats.note.startswith("converged")


def test_noisy_samples_do_not_converge_and_hit_max_samples():
    rng = random.Random(0)
    c = SampleCollector(max_samples=200, budget_s=None)
    while not c.done():
        c.add(rng.uniform(0.5, 1.5))  # ~30% spread: +-1% needs thousands of samples
    assert c.reason == "max_samples" and c.n == 200
    assert c.half_width_rel() > 0.01


def test_budget_stops_even_below_min_samples():
    c = SampleCollector(budget_s=1.0)
    while not c.done():
        c.add(250.0 * (1 + 0.2 * (c.n % 2)))  # slow, noisy kernel: 250-300 ms a call
    assert c.reason == "budget" and c.n == 4
    stats = to_time_stats(c)
    assert "budget" in stats.note and "fewer than the 30" in stats.note


def test_overhead_counts_against_the_budget():
    c = SampleCollector(budget_s=1.0)
    c.add(1.0, overhead_s=1.0)
    assert c.reason == "budget"


def test_collector_rejects_bad_samples():
    c = SampleCollector()
    for bad in (float("nan"), float("inf"), -1.0):
        with pytest.raises(ValueError):
            c.add(bad)
    assert to_time_stats(c).measured is False


# ------------------------------------------------------------------------------- speedup


def _ts(median, low, high):
    return TimeStats(measured=True, median_ms=median, ci_low_ms=low, ci_high_ms=high, samples=30, note="")


def test_speedup_is_the_ratio_of_medians():
    assert speedup(_ts(2.0, 1.9, 2.1), _ts(0.5, 0.45, 0.55)) == pytest.approx(4.0)
    with pytest.raises(ValueError):
        speedup(TimeStats(), _ts(1, 1, 1))


def test_faster_beyond_noise_needs_disjoint_intervals():
    """The rule the workspace's best follows (agent/workspace/attempt.py): one interval's high end
    below the other's low end by more than a fresh process's own offset."""
    assert below_beyond_offset(1.02, 1.05)
    assert not below_beyond_offset(1.06, 1.05)  # overlap
    assert not below_beyond_offset(1.15, 0.98)  # slower
    assert not below_beyond_offset(0.0042, 0.00432)  # within a process's offset
    assert not below_beyond_offset(float("nan"), 1.0)


# ---------------------------------------------------------------------------- interleave


def schedule(blocks: int, size: int, arms=("A", "B")) -> list[str]:
    """The arm of each call when `blocks` blocks of `size` calls per arm run in block_order (as
    tools/timing/blocks.py's timing loop runs them)."""
    return [arm for block in range(blocks) for arm in block_order(block, arms) for _ in range(size)]


def test_block_order_alternates_which_arm_goes_first():
    order = schedule(4, 2)
    assert order == list("AABB" "BBAA" "AABB" "BBAA")
    assert Counter(order) == {"A": 8, "B": 8}
    assert block_order(1, ("A", "B", "C")) == ("C", "B", "A")


def test_block_order_cancels_linear_drift_in_mean_position():
    positions: dict[str, list[int]] = {"A": [], "B": []}
    for t, arm in enumerate(schedule(10, 5)):
        positions[arm].append(t)
    assert sum(positions["A"]) == sum(positions["B"])


class DriftingGpu:
    """Fake timings: each arm's true time, a clock that slows 0.2% per call, a little noise."""

    def __init__(self, true_ms: dict[str, float], drift: float = 0.002, seed: int = 0) -> None:
        self.true_ms = true_ms
        self.drift = drift
        self.calls = 0
        self.rng = random.Random(seed)

    def time_one(self, arm: str) -> float:
        self.calls += 1
        return self.true_ms[arm] * (1 + self.drift * self.calls) * (1 + 0.002 * self.rng.random())


def _ratio(collectors):
    return collectors["eager"].summary()[0] / collectors["candidate"].summary()[0]


def test_interleaving_keeps_the_ratio_under_drift():
    true = {"candidate": 1.0, "eager": 2.0}
    gpu = DriftingGpu(true)
    arms = {a: SampleCollector(max_samples=10_000, budget_s=None) for a in true}
    for arm in schedule(20, 5, tuple(true)):
        arms[arm].add(gpu.time_one(arm))
    assert arms["candidate"].n == arms["eager"].n == 100
    assert _ratio(arms) == pytest.approx(2.0, rel=0.01)

    # The same drift with all of one arm, then all of the other, biases the ratio badly.
    gpu = DriftingGpu(true)
    seq = {a: SampleCollector(max_samples=10_000, budget_s=None) for a in true}
    for arm in ("candidate", "eager"):
        for _ in range(100):
            seq[arm].add(gpu.time_one(arm))
    assert abs(_ratio(seq) / 2.0 - 1) > 0.05

