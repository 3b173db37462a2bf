"""Interleaved timing of several arms (the candidate and the eager reference) so drift hits both.

GPU timings drift within a run: clocks ramp up or throttle with temperature, other tenants come
and go. Timing all of the candidate and then all of the reference would charge that drift to
one side. Instead the arms are timed in blocks of `block_size` calls, and the order of the arms
reverses from one block to the next (A B | B A | A B | ...: ABBA at the level of blocks). Over
each pair of blocks both arms sit at the same mean position in time, so a drift that is linear
over a pair cancels exactly, and no arm is systematically first after a switch.

This module is a pure scheduler: the caller supplies `time_one(arm) -> milliseconds`, which
does the flushing, the timed call and the output check.
"""
from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass

from tools.stats import SampleCollector, StopReason

DEFAULT_ARMS = ("candidate", "eager")


def block_order(block: int, arms: Sequence[str] = DEFAULT_ARMS) -> tuple[str, ...]:
    """The order of the arms within block number `block`: as given when even, reversed when odd."""
    return tuple(arms) if block % 2 == 0 else tuple(reversed(arms))


def block_schedule(
    n_blocks: int | None, block_size: int, arms: Sequence[str] = DEFAULT_ARMS
) -> Iterator[tuple[str, int]]:
    """Yield (arm, index) pairs, index counting that arm's calls from 0; endless if n_blocks is None."""
    if block_size < 1:
        raise ValueError("block_size must be at least 1")
    if len(set(arms)) != len(arms) or not arms:
        raise ValueError(f"arms must be distinct and non-empty: {arms!r}")
    counts = dict.fromkeys(arms, 0)
    blocks = itertools.count() if n_blocks is None else range(n_blocks)
    for block in blocks:
        for arm in block_order(block, arms):
            for _ in range(block_size):
                yield arm, counts[arm]
                counts[arm] += 1


@dataclass
class InterleaveOutcome:
    collectors: dict[str, SampleCollector]
    reason: StopReason  # why the whole run stopped
    blocks: int


class Interleaver:
    """Drives one SampleCollector per arm through the block schedule until the run is done.

    The run stops at a block boundary (so every arm has the same number of samples) when every
    arm is done, or as soon as one arm hits a hard limit (its budget or max_samples): the
    others are then stopped with that reason, since timing one arm alone would no longer share
    the drift. An arm that converged early keeps being timed until the others are done too
    (extra samples only tighten its interval). Sample counts can pass max_samples by less than
    one block.
    """

    def __init__(
        self,
        time_one: Callable[[str], float],
        collectors: Mapping[str, SampleCollector],
        block_size: int = 5,
        max_blocks: int | None = None,
    ) -> None:
        if len(collectors) < 1:
            raise ValueError("need at least one arm")
        self.time_one = time_one
        self.collectors = dict(collectors)
        self.block_size = block_size
        self.max_blocks = max_blocks

    def run(self) -> InterleaveOutcome:
        arms = tuple(self.collectors)
        blocks = itertools.count() if self.max_blocks is None else range(self.max_blocks)
        done_blocks = 0
        for block in blocks:
            for arm in block_order(block, arms):
                collector = self.collectors[arm]
                for _ in range(self.block_size):
                    collector.add(self.time_one(arm))
            done_blocks = block + 1
            reason = self._stop_reason()
            if reason is not None:
                return InterleaveOutcome(self.collectors, reason, done_blocks)
        for collector in self.collectors.values():
            if not collector.done():
                collector.stop("max_samples")
        return InterleaveOutcome(self.collectors, "max_samples", done_blocks)

    def _stop_reason(self) -> StopReason | None:
        collectors = self.collectors.values()
        if all(c.converged() for c in collectors):
            return "converged"
        hard = [r for r in (c.limit_reason() for c in collectors) if r is not None]
        if hard:
            for collector in collectors:
                if not collector.done():
                    collector.stop(hard[0])
            return hard[0]
        return None
