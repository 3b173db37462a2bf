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

import json
import math
from dataclasses import dataclass
from typing import Any

from agent.builtin import codegen
from agent.builtin.ir import Plan
from agent.builtin.templates import ONE_TILE_MAX
from agent.builtin.split import split_first, split_space

FAILED = {"compile_error", "runtime_error", "timeout", "crashed", "rejected"}
NOT_JUDGED = {"error"}  # an evaluator fault: the configuration may be proposed again
SIZE_KEYS = ("BLOCK", "BLOCK_M", "BLOCK_N", "BLOCK_K", "BLOCK_R", "BLOCK_H", "BLOCK_W", "BLOCK_L", "num_stages")
# REDUCED_DOTS: the float32 dot precisions that an `incorrect` drops (dots(plan): those tried, in order)
REDUCED_DOTS = ("tf32", "tf32x3")
SMS = 132  # programs to fill a large GPU (H100/H200: 132 SMs)
SMEM_BYTES = 200 * 1024  # shared memory a matmul config may ask for (pipelined A and B tiles)


@dataclass
class Outcome:
    config: dict[str, Any]
    verdict: str | None  # None: proposed, no result seen yet
    median_ms: float | None = None


def dots(plan: Plan) -> tuple[str, ...]:
    """A float32 product's dot precisions under the run's precision, in the order tried."""
    from tools.precision import dot_precision

    return dot_precision(plan.precision)


def key(config: dict[str, Any]) -> str:
    return json.dumps(config, sort_keys=True)


def pow2(n: int) -> int:
    return 1 << max(0, math.ceil(math.log2(max(1, n))))


def unique(configs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The configurations in their order, each once (every plan kind's space ends with it)."""
    seen, out = set(), []
    for c in configs:
        if key(c) not in seen:
            seen.add(key(c))
            out.append(c)
    return out


# --- the spaces -------------------------------------------------------------------------------------


def space(plan: Plan) -> list[dict[str, Any]]:
    from agent.builtin.gemv import gemv_space
    from agent.builtin.mm_reduce import mm_reduce_space

    spaces = {"pointwise": _pointwise, "rowwise": _rowwise, "colwise": _colwise, "matmul": _matmul,
              "twolevel": _twolevel, "gemv": gemv_space, "mm_reduce": mm_reduce_space}
    if plan.kind not in spaces:  # pool, scan, argreduce (agent.builtin.window)
        from agent.builtin.window import kinds

        return kinds()[plan.kind].space(plan)
    return spaces[plan.kind](plan)


def _pointwise(plan: Plan) -> list[dict[str, Any]]:
    n = math.prod(plan.nodes[plan.out].shape)
    cap = max(128, pow2(n))
    order = [(1024, 4), (2048, 8), (4096, 8), (512, 4), (2048, 4), (8192, 16), (1024, 8), (4096, 4), (256, 2), (8192, 8)]
    if n >= 1 << 24:  # large: wide blocks first
        order = [(2048, 8), (4096, 8), (1024, 4), (8192, 16), (4096, 4)] + order
    return unique([{"BLOCK": min(b, cap), "num_warps": min(w, max(1, min(b, cap) // 128))} for b, w in order])


def _warps_for(elements: int) -> list[int]:
    if elements <= 512:
        return [2, 4]
    if elements <= 2048:
        return [4, 8]
    if elements <= 8192:
        return [8, 4, 16]
    return [16, 8]


def _rowwise(plan: Plan) -> list[dict[str, Any]]:
    full = plan.full_shape
    d0 = plan.red_dims[0]
    rows, width = math.prod(full[:d0]), math.prod(full[d0:])
    configs = _row_configs(rows, width)
    # rows split across programs (agent.builtin.split): first when the rows are too few to fill the
    # device, the only choice when the one-program-per-row kernels decline them
    splits = split_space(rows, width, SMS)
    if rows < codegen.FEW_ROWS and width >= codegen.LONG_ROW:
        return splits
    return unique(splits + configs if split_first(rows, width, SMS) else configs + splits)


def _twolevel(plan: Plan) -> list[dict[str, Any]]:
    """Row reductions, then a global one: the row kernel's configurations (agent.builtin.twolevel)."""
    full = plan.full_shape
    d0 = plan.red_dims[0]
    return _row_configs(math.prod(full[:d0]), math.prod(full[d0:]))


def _row_configs(rows: int, width: int) -> list[dict[str, Any]]:
    p = pow2(width)
    configs: list[dict[str, Any]] = []
    if p <= ONE_TILE_MAX:
        # whole rows in one tile; several rows per program when rows are short
        target = max(p, 2048)
        bm_default = max(1, min(pow2(rows), target // p))
        # keep enough programs to fill the GPU when there are many rows
        while bm_default > 1 and math.ceil(rows / bm_default) < 2 * SMS:
            bm_default //= 2
        bms = [bm_default] + [bm for bm in (1, 2, 4, 8, 16, 32) if bm != bm_default and bm * p <= ONE_TILE_MAX
                                                                    and bm <= pow2(rows)]
        for bm in bms:
            for w in _warps_for(bm * p):
                configs.append({"looped": False, "BLOCK_M": bm, "BLOCK_R": p, "num_warps": w})
    if width > 1024:
        for br, w in ((4096, 8), (2048, 8), (8192, 16), (1024, 4), (4096, 16), (2048, 4)):
            if br < p:
                configs.append({"looped": True, "BLOCK_M": 1, "BLOCK_R": br, "num_warps": w})
    return unique(configs)


def _colwise(plan: Plan) -> list[dict[str, Any]]:
    full = plan.full_shape
    d0, d1 = plan.red_dims[0], plan.red_dims[-1]
    outer, red, inner = math.prod(full[:d0]), math.prod(full[d0:d1 + 1]), math.prod(full[d1 + 1:])
    pn, pr = pow2(inner), pow2(red)
    # first: 64 columns by 64 reduced rows under 8 warps, the columns narrowed until the programs
    # fill the device. Measured on an H100 (docs/builtin-measured.md, sum and amax over the middle
    # of [128, 4096, 4095]): 64x64/8 warps ran at eager's speed, 1.15x compile; 32x128/4 warps,
    # the first configuration before, at 0.48x eager; the order below is that measurement's.
    bn = 64
    while bn > 16 and outer * math.ceil(inner / bn) < 2 * SMS:
        bn //= 2
    bn = min(bn, max(16, pn))
    br = min(64, max(16, pr))
    configs = [{"BLOCK_R": br, "BLOCK_N": bn, "num_warps": 8 if br * bn >= 4096 else 4}]
    for brr, bnn, w in ((128, 64, 8), (128, 16, 4), (32, 128, 8), (64, 128, 8), (64, 32, 4), (32, 64, 4),
                        (32, 32, 4), (8, 512, 8), (8, 256, 4), (16, 128, 4), (64, 16, 4)):
        configs.append({"BLOCK_R": min(brr, max(8, pr)), "BLOCK_N": min(bnn, max(16, pn)), "num_warps": w})
    return unique(configs)


MATMUL_CONFIGS = (
    # BLOCK_M, BLOCK_N, BLOCK_K, GROUP_M, num_warps, num_stages
    (128, 128, 64, 8, 8, 3), (128, 256, 64, 8, 8, 3), (128, 128, 32, 8, 4, 4), (256, 128, 64, 8, 8, 3),
    (128, 64, 32, 8, 4, 4), (64, 128, 32, 8, 4, 4), (64, 256, 32, 8, 4, 4), (128, 128, 64, 4, 8, 4),
    (64, 64, 32, 8, 4, 4), (128, 32, 32, 8, 4, 4), (64, 32, 32, 8, 2, 5), (32, 64, 32, 8, 2, 5),
    (32, 32, 32, 4, 4, 2), (16, 64, 64, 4, 4, 3),
)


def _matmul(plan: Plan) -> list[dict[str, Any]]:
    mm = next(n for n in plan.nodes if n.op == "mm")
    a = plan.leaves[mm.args[0][1]]
    b = plan.leaves[mm.args[1][1]]
    m, k = a.shape[-2], a.shape[-1]
    n = b.shape[-1]
    batch = a.shape[0] if len(a.shape) == 3 else 1
    fp32 = a.dtype == "torch.float32"
    precisions = list(dots(plan)) if fp32 else ["native"]
    configs = []
    for bm, bn, bk, g, w, s in MATMUL_CONFIGS:
        if fp32 and bk > 32 and bm * bn >= 128 * 256:
            bk = 32  # float32 tiles take twice the shared memory per stage
        bm, bn, bk = min(bm, max(16, pow2(m))), min(bn, max(16, pow2(n))), min(bk, max(16, pow2(k)))
        if (bm * bk + bk * bn) * (4 if fp32 else 2) * s > SMEM_BYTES:
            continue  # more shared memory than an H100/H200 SM has for one program
        configs.append({"BLOCK_M": bm, "BLOCK_N": bn, "BLOCK_K": bk, "GROUP_M": g, "num_warps": w, "num_stages": s})
    configs = unique(configs)

    def tiles(c):
        return batch * math.ceil(m / c["BLOCK_M"]) * math.ceil(n / c["BLOCK_N"])

    # default: the first (largest) tile that still gives every SM work; small problems get small tiles
    filling = [c for c in configs if tiles(c) >= SMS]
    first = filling[0] if filling else max(configs, key=lambda c: (tiles(c), -c["BLOCK_M"] * c["BLOCK_N"]))
    ordered = [first] + [c for c in configs if c is not first]
    out = []
    for precision in precisions:
        for c in ordered:
            out.append({**c, "precision": precision} if precision != "native" else dict(c))
    from agent.builtin.skinny import shaped_first

    return shaped_first(plan, unique(out))  # skinny shapes and split-K first (agent.builtin.skinny)


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
