"""Matrix products whose shape the generic tile fits badly (the `matmul` plan's configurations put
these first): configurations picked from the shapes, and split-K.

- a tiny K (at most SKINNY_K: an outer product such as M x 32 @ 32 x M) and a large output: the whole K is one step,
  so the time is writing the M x N output; one BLOCK_K covers K, no pipelining stages, large
  output tiles. The dots are IEEE float32 (for float32 data): the kernel is bound by the output's
  bytes, so 3xTF32 would buy nothing, and these shapes drop it from the space;
- a small N or M (at most SKINNY_SIDE, but more than the gemv plan's few) of a large product: the tile's short side
  is that side (at least 16, tl.dot's least), the long side and BLOCK_K as large as shared memory
  allows;
- output tiles for at most half the SMs and a long K: K split into SPLIT_K chunks, each written in
  float32 by partial_product_kernel, then added in chunk order by a second kernel that applies the
  epilogue (kernels/matmul_splitk.py.j2; deterministic, no atomics).
"""
from __future__ import annotations

import math
from typing import Any

from agent.builtin.emitter import Emitter
from agent.builtin.indexing import Group
from agent.builtin.ir import Plan, Problem, Unrecognized
from agent.builtin.configs import unique
from agent.builtin.templates import Context, common_variables, render, store_value

SKINNY_K = 64
SKINNY_SIDE = 32
LARGE_OUTPUT = 1 << 20  # a tiny K matters when the output has at least this many elements
LARGE_PRODUCT = 1 << 24  # a small side matters when M * N * K is at least this
MIN_CHUNK_STEPS = 8  # a split-K chunk is at least this many BLOCK_K steps


def _pow2(x: int) -> int:
    return 1 << max(0, math.ceil(math.log2(max(1, x))))


def shaped_first(plan: Plan, configs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The matmul plan's configurations with those picked from its shape first (IEEE for float32);
    for a tiny K, the 3xTF32 ones are dropped."""
    from agent.builtin.configs import SMEM_BYTES

    mm = next(n for n in plan.nodes if n.op == "mm")
    if mm.name != "mm":
        return configs
    a = plan.leaves[mm.args[0][1]]
    (m, n), k = mm.shape, a.shape[1]
    fp32 = a.dtype == "torch.float32"
    size = 4 if fp32 else 2
    extra: list[dict[str, Any]] = []
    if k <= SKINNY_K and m * n >= LARGE_OUTPUT:
        bk = max(16, _pow2(k))
        for bm, bn, w in ((128, 128, 8), (128, 256, 8), (256, 128, 8), (64, 128, 4), (128, 64, 4), (64, 64, 4)):
            extra.append(_tile(bm, bn, bk, 8, w, 1, m, n, k))
        configs = [c for c in configs if c.get("precision") != "tf32x3"]
    elif min(m, n) <= SKINNY_SIDE and m * n * k >= LARGE_PRODUCT:
        short = max(16, _pow2(min(m, n)))
        for long, bk, w, s in ((128, 64, 4, 3), (256, 64, 8, 3), (64, 128, 4, 3), (128, 128, 8, 2), (64, 64, 4, 4)):
            bm, bn = (long, short) if n <= m else (short, long)
            extra.append(_tile(bm, bn, bk, 8, w, s, m, n, k))
    bk = 32 if fp32 else 64
    split_tiles = extra[:2] + [_tile(128, 128, bk, 8, 8, 3, m, n, k), _tile(64, 128, bk, 8, 4, 4, m, n, k),
                               _tile(64, 64, bk, 8, 4, 4, m, n, k), _tile(32, 32, bk, 4, 4, 4, m, n, k)]
    for c in split_tiles:
        split = split_k(math.ceil(m / c["BLOCK_M"]) * math.ceil(n / c["BLOCK_N"]), k, c["BLOCK_K"])
        if split > 1:
            extra.append({**c, "SPLIT_K": split})
    if fp32:
        extra = [{**c, "precision": "ieee"} for c in extra]
    fits = [c for c in extra if (c["BLOCK_M"] * c["BLOCK_K"] + c["BLOCK_K"] * c["BLOCK_N"]) * size
            * max(1, c["num_stages"]) <= SMEM_BYTES]
    return unique(fits + configs)


def split_k(tiles: int, k: int, block_k: int) -> int:
    """K's chunks for `tiles` output tiles: 1 unless the tiles leave half the SMs idle; then doubled
    until every SM has a program, while each chunk keeps MIN_CHUNK_STEPS steps of `block_k`."""
    from agent.builtin.configs import SMS

    split = 1
    while tiles * 2 <= SMS and tiles * split < SMS and k // (block_k * split * 2) >= MIN_CHUNK_STEPS:
        split *= 2
    return split


def _tile(bm: int, bn: int, bk: int, group: int, warps: int, stages: int, m: int, n: int, k: int) -> dict[str, Any]:
    return {"BLOCK_M": min(bm, max(16, _pow2(m))), "BLOCK_N": min(bn, max(16, _pow2(n))),
            "BLOCK_K": min(bk, max(16, _pow2(k))), "GROUP_M": group, "num_warps": warps, "num_stages": stages}


def render_splitk(plan: Plan, problem: Problem, config: dict[str, Any], ctx: Context) -> str:
    """A 2-D product with K split (kernels/matmul_splitk.py.j2)."""
    mm = next(n for n in plan.nodes if n.op == "mm")
    if mm.name != "mm":
        raise Unrecognized("split-K of a batched matrix product")
    a, b = (plan.leaves[r[1]] for r in mm.args)
    if a.dtype != b.dtype:
        raise Unrecognized(f"a matrix product of {a.dtype} and {b.dtype}")
    (m, n), k = mm.shape, a.shape[1]
    out = plan.nodes[plan.out]
    if math.prod(out.shape) != m * n:
        raise Unrecognized("the epilogue changes the product's size")
    em = Emitter(plan, {"full": [Group(m * n, "offs", "mask", "")]}, acc="acc")
    value, present = em.gen(("node", plan.out), "full", tuple(out.shape))
    precision = config.get("precision", "ieee") if a.dtype == "torch.float32" else None
    return render("matmul_splitk.py.j2", combine_body=em.outer, combine_result=store_value(value, present, 1, "[BLOCK]"),
                  m=m, n=n, k=k, a_index=mm.args[0][1], b_index=mm.args[1][1], precision=precision,
                  **common_variables(plan, problem, config, ctx))
