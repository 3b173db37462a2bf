"""The timing protocol's plan: the rotating pool of input sets (together larger than L2, so every
timed call reads its inputs from memory), the calls per block, the budget per arm, and the seed of
every timed call's inputs (new values on each pass over the pool)."""
from __future__ import annotations

import math
import random
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from tools.judge.bench import Bench

MAX_POOL = 64  # input sets in the rotating pool
KEEP_BYTES = 1 << 30  # timed outputs held at once (per arm) for checking; input sets written per block


@dataclass
class TimingPlan:
    pool: int  # input sets in rotation (together larger than L2 where memory allows)
    block: int  # timed calls per block and arm
    budget_s: float  # per arm
    seed: int

    def call(self, n: int) -> tuple[int, int]:
        """(slot, seed) of the n-th timed call: each pass over the pool gets new values."""
        slot, rotation = n % self.pool, n // self.pool
        return slot, random.Random(f"{self.seed}:{rotation}:{slot}").getrandbits(62)


def pool_slots(l2_bytes: int, set_bytes: int) -> int:
    """Input sets in the rotating pool: together more than twice L2, where memory allows. One set
    larger than KEEP_BYTES is one pool slot: a block then holds one call, every call gets new
    values either way, and a second multi-GB set held by the reference worker was memory the
    candidate's worker lacked (an 8 GiB problem did not fit on an 80 GiB card)."""
    if set_bytes > KEEP_BYTES:
        return 1
    return max(2, min(MAX_POOL, math.ceil(2 * l2_bytes / max(set_bytes, 1)) + 1))


def plan(bench: "Bench", salt: int = 0) -> TimingPlan:
    """The timing plan; `salt` varies the timed inputs (tools/timing/blocks.py gives each evaluation its own)."""
    l2 = int(bench.environment.get("l2_bytes") or 50 << 20)
    problem = bench.problem
    pool = pool_slots(l2, problem.input_bytes)
    # a block's input sets are distinct pool sets, all written into the candidate before the block
    block = max(1, min(10, pool, KEEP_BYTES // max(problem.output_bytes, 1), KEEP_BYTES // max(problem.input_bytes, 1)))
    return TimingPlan(pool=pool, block=block, budget_s=bench.options.timing_budget_s, seed=bench.seeds[0] ^ 0x71AE ^ salt)
