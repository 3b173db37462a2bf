"""The `gemv` plan (agent.builtin.products): a 2-D product with a tiny side, drafted from
kernels/gemv.py.j2, and its configurations.

A matrix-vector product is memory-bound: the time is one read of the large operand. The kernel
streams it: each program takes BLOCK_R rows of the matrix (the product's rows, or, for a vector on
the left, its columns read through B's strides) and one block of the few vectors, and walks K in
BLOCK_K-wide steps with float32 multiply-adds (IEEE, no TF32: there is no tensor-core tile to fill).
When the rows alone give too few programs to keep the GPU's memory system busy, K is split into
SPLIT_K chunks: each (row block, chunk) program writes its partial sums to a float32 workspace, and
a second kernel adds the chunks in order (deterministic, no atomics) and applies the epilogue.
"""
from __future__ import annotations

import math
from typing import Any

from agent.builtin.emitter import Emitter
from agent.builtin.indexing import Group
from agent.builtin.ir import Plan, Problem, Unrecognized
from agent.builtin.products import gemv_sides
from agent.builtin.configs import unique
from agent.builtin.registry import Family, register
from agent.builtin.templates import Context, common_variables, render, store_value

PROGRAMS_PER_SM = 8  # resident programs per SM a streaming kernel wants (bytes in flight)
MIN_STEPS = 4  # a K chunk is at least this many BLOCK_K steps


def render_gemv(plan: Plan, problem: Problem, config: dict[str, Any], ctx: Context) -> str:
    mm_index = next(i for i, n in enumerate(plan.nodes) if n.op == "mm")
    mm = plan.nodes[mm_index]
    a, b = (plan.leaves[r[1]] for r in mm.args)
    if a.dtype != b.dtype:
        raise Unrecognized(f"a matrix product of {a.dtype} and {b.dtype}")
    orientation, r, j, k = gemv_sides(plan)
    m, n = mm.shape
    out = plan.nodes[plan.out]
    if math.prod(out.shape) != m * n:
        raise Unrecognized("the epilogue changes the product's size")
    split = int(config["SPLIT_K"]) > 1
    if orientation == "rows":
        groups = [Group(m, "rr", "rmask", "[:, None]"), Group(n, "jj", "jmask", "[None, :]")]
        offsets = f"rr[:, None] * {n} + jj[None, :]"
    else:
        groups = [Group(m, "jj", "jmask", "[None, :]"), Group(n, "rr", "rmask", "[:, None]")]
        offsets = f"jj[None, :] * {n} + rr[:, None]"
    body, result, combine_body, combine_result = [], "", [], ""
    if split:  # the epilogue runs in the second pass, over the flat output
        em = Emitter(plan, {"full": [Group(m * n, "offs", "mask", "")]}, acc="acc")
        value, present = em.gen(("node", plan.out), "full", tuple(out.shape))
        combine_body, combine_result = em.outer, store_value(value, present, 1, "[BLOCK]")
    else:
        em = Emitter(plan, {"full": groups}, acc="acc")
        value, present = em.gen(("node", plan.out), "full", tuple(out.shape))
        body, result = em.outer, store_value(value, present, 2, "[BLOCK_R, BLOCK_J]")
    return render("gemv.py.j2", body=body, result=result, combine_body=combine_body, combine_result=combine_result,
                  split=split, orientation=orientation, m=m, n=n, r=r, j=j, k=k, out_offsets=offsets,
                  a_index=mm.args[0][1], b_index=mm.args[1][1],
                  mat_index=mm.args[0][1] if orientation == "rows" else mm.args[1][1],
                  vec_index=mm.args[1][1] if orientation == "rows" else mm.args[0][1],
                  **common_variables(plan, problem, config, ctx))


def _pow2(x: int) -> int:
    return 1 << max(0, math.ceil(math.log2(max(1, x))))


# (BLOCK_R, BLOCK_K, num_warps): a row-major matrix is read along K (each row's BLOCK_K elements
# contiguous), so tiles are wide in K; a matrix read across its rows (a vector on the left: B's
# columns are contiguous) is read along R, so tiles are tall in R
ALONG_K = ((8, 512, 4), (4, 1024, 4), (16, 512, 8), (8, 1024, 8), (2, 2048, 8), (32, 256, 8), (4, 512, 4),
           (16, 256, 4), (1, 4096, 8))
ALONG_R = ((256, 16, 4), (128, 32, 4), (512, 16, 8), (256, 32, 8), (128, 64, 8), (64, 64, 4), (1024, 8, 8))


def gemv_space(plan: Plan) -> list[dict[str, Any]]:
    """Configurations from the shapes: tile shapes along the matrix's contiguous dim, the vectors
    in one block, and SPLIT_K so the programs fill the GPU (search.SMS) with work for every SM."""
    from agent.builtin.configs import SMS

    mm = next(n for n in plan.nodes if n.op == "mm")
    a, b = (plan.leaves[x[1]] for x in mm.args)
    orientation, r, j, k = gemv_sides(plan)
    stride_r, stride_k = (a.strides[0], a.strides[1]) if orientation == "rows" else (b.strides[1], b.strides[0])
    along_k = stride_k == 1 or (stride_r != 1 and abs(stride_k) <= abs(stride_r))
    bj = _pow2(j)
    configs: list[dict[str, Any]] = []
    for br, bk, warps in ALONG_K if along_k else ALONG_R:
        br = min(br, _pow2(r))
        bk = min(bk, max(16, _pow2(k)))
        while br * bj * bk > 8192 and bk > 16:  # the lanes stay within registers: BLOCK_J vectors at once
            bk //= 2
        programs = math.ceil(r / br) * math.ceil(j / bj)
        steps = math.ceil(k / bk)
        split = max(1, min(math.ceil(PROGRAMS_PER_SM * SMS / programs), steps // MIN_STEPS))
        split = 1 << int(math.log2(split))  # powers of two: neighbours in the search double or halve it
        for s in dict.fromkeys((split, max(1, split // 2), split * 2 if split * 2 <= steps // MIN_STEPS else split)):
            configs.append({"BLOCK_R": br, "BLOCK_J": bj, "BLOCK_K": bk, "SPLIT_K": s, "num_warps": warps})
    return unique(configs)


FAMILY = register(Family(kind="gemv", render=render_gemv, space=gemv_space))
