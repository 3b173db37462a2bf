"""Parameter search: the configurations each template can run with, in a fixed order (a size-based
default first), and the choice of the next one from what the evaluator said about those tried.

- A configuration that failed (compile_error, runtime_error, timeout, crashed, rejected) goes away,
  and so does every untried one at least as large in all its tile sizes (resources only grow).
- A configuration whose latest outcome was an evaluator fault (verdict error) was not judged: it
  counts as untried and nothing is pruned for it (the evaluator, not the kernel, failed).
- Dots on float32 data follow the run's precision (`plan.precision`, tools/precision.py). Under
  `fp32` they are never plain TF32 (one TF32 dot over a deep K is not an fp32 result, and the
  baselines run IEEE): 3xTF32 (`input_precision="tf32x3"`, three TF32 products that carry the
  operands' low bits, fp32-accurate on tensor cores) first, then IEEE. Under `tf32` (baselines
  with TF32 too) plain TF32 comes first. `incorrect` for a configuration with TF32 or 3xTF32
  dots drops that precision: the rest run in the next one.
- Once attempts are timed (on a GPU), the search is local: untried neighbours of the fastest
  configuration (one parameter changed) come first, in the space's order; then the rest.
- Without timing (the CPU interpreter) it walks the space in order, so a run is deterministic.

Nothing here is random: the same history gives the same next configuration.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from agent.builtin.configs import key
from agent.builtin.ir import Plan
from agent.builtin.registry import space  # each kind's space: its family's

FAILED = {"compile_error", "runtime_error", "timeout", "crashed", "rejected"}
NOT_JUDGED = {"error"}  # an evaluator fault: the configuration may be proposed again
SIZE_KEYS = ("BLOCK", "BLOCK_M", "BLOCK_N", "BLOCK_K", "BLOCK_R", "BLOCK_H", "BLOCK_W", "BLOCK_L", "num_stages")
# REDUCED_DOTS: the float32 dot precisions that an `incorrect` drops (dots(plan): those tried, in order)
REDUCED_DOTS = ("tf32", "tf32x3")


@dataclass
class Outcome:
    config: dict[str, Any]
    verdict: str | None  # None: proposed, no result seen yet
    median_ms: float | None = None


# --- choosing the next ------------------------------------------------------------------------------


def _dominates(candidate: dict[str, Any], failed: dict[str, Any]) -> bool:
    """Whether `candidate` is at least as large as a failed configuration in every size, same variant."""
    for name, value in failed.items():
        if name in SIZE_KEYS or name in ("num_warps", "GROUP_M"):
            continue
        if candidate.get(name) != value:
            return False
    return all(candidate.get(name, 0) >= failed[name] for name in SIZE_KEYS if name in failed)


def _neighbours(a: dict[str, Any], b: dict[str, Any]) -> bool:
    """One tuning parameter apart (a tile size, warps, stages, GROUP_M or SPLIT_K; not a variant)."""
    differ = [k for k in set(a) | set(b) if a.get(k) != b.get(k)]
    return len(differ) == 1 and differ[0] in SIZE_KEYS + ("num_warps", "GROUP_M", "SPLIT_K")


def next_config(plan: Plan, history: list[Outcome]) -> dict[str, Any] | None:
    """The next configuration to try, or None when the space is spent."""
    configs = space(plan)
    tried = {key(o.config) for o in history if o.verdict not in NOT_JUDGED}
    failed = [o.config for o in history if o.verdict in FAILED]
    wrong = [o.config for o in history if o.verdict == "incorrect"]
    dropped = {c.get("precision") for c in wrong if c.get("precision") in REDUCED_DOTS}
    drop_variants = [{k: v for k, v in c.items() if k in ("looped",)} for c in wrong if "looped" in c]

    def alive(c: dict[str, Any]) -> bool:
        if key(c) in tried:
            return False
        if any(_dominates(c, f) for f in failed):
            return False
        if c.get("precision") in dropped:
            return False
        return not any(v and all(c.get(k) == x for k, x in v.items()) for v in drop_variants)

    left = [c for c in configs if alive(c)]
    if not left:
        return None
    timed = [o for o in history if o.verdict == "ok" and o.median_ms is not None]
    if timed:
        best = min(timed, key=lambda o: o.median_ms).config
        near = [c for c in left if _neighbours(c, best)]
        if near:
            return near[0]
    return left[0]


def best_config(history: list[Outcome]) -> dict[str, Any] | None:
    """The fastest correct configuration (the first correct one when nothing was timed)."""
    ok = [o for o in history if o.verdict == "ok"]
    if not ok:
        return None
    timed = [o for o in ok if o.median_ms is not None]
    return min(timed, key=lambda o: o.median_ms).config if timed else ok[0].config
