"""Which timed blocks have a call judged against float64 (tools/timing/timed_exact.py `chosen`): the
blocks late in a long timing are reached too, not only the first ones, and the last always."""
from __future__ import annotations

import random

from tools.timing.timed_exact import MAX_SAMPLES, chosen


def run(rng: random.Random, blocks: int) -> list[int]:
    picked: list[int] = []
    for k in range(blocks):
        if chosen(rng, k, k == blocks - 1, len(picked)):
            picked.append(k)
    return picked


def test_a_kernel_exact_only_on_its_first_twenty_blocks_is_caught_almost_always():
    """Each of 1/2 up to 8 samples (before) judged nothing after about the sixteenth block: a
    kernel exact on its first 20 of 300 blocks and cheap after them was never judged there."""
    rng = random.Random(53)
    runs = [run(rng, 300) for _ in range(2000)]
    reached = sum(any(k >= 20 and k < 299 for k in picked) for picked in runs) / len(runs)
    assert reached > 0.98, reached
    assert all(picked[-1] == 299 for picked in runs)  # the last block always
    assert all(len(picked) <= MAX_SAMPLES + 1 for picked in runs)
    mean = sum(len(picked) for picked in runs) / len(runs)
    assert 8 <= mean <= MAX_SAMPLES + 1, mean


def test_a_short_timing_has_most_of_its_blocks_judged():
    rng = random.Random(7)
    runs = [run(rng, 3) for _ in range(1000)]
    assert all(picked[:2] == [0, 1] and picked[-1] == 2 for picked in runs)  # probability 2/(k+1) >= 1 there
