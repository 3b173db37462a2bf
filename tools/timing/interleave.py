"""Interleaved timing of several arms (the candidate and the eager reference) so drift hits both.

GPU timings drift within a run: clocks ramp up or throttle with temperature, other tenants come
and go. Timing all of the candidate and then all of the reference would charge that drift to
one side. Instead the arms are timed in blocks of `block_size` calls, and the order of the arms
reverses from one block to the next (A B | B A | A B | ...: ABBA at the level of blocks). Over
each pair of blocks both arms sit at the same mean position in time, so a drift that is linear
over a pair cancels exactly, and no arm is systematically first after a switch.

tools/timing/blocks.py runs the blocks; this module only says the order of the arms in each.
"""
from __future__ import annotations

from collections.abc import Sequence

DEFAULT_ARMS = ("candidate", "eager")


def block_order(block: int, arms: Sequence[str] = DEFAULT_ARMS) -> tuple[str, ...]:
    """The order of the arms within block number `block`: as given when even, reversed when odd."""
    return tuple(arms) if block % 2 == 0 else tuple(reversed(arms))
