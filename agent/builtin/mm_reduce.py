"""The `mm_reduce` plan (agent.builtin.products): a 2-D product followed by reductions over its last
dim (a Linear, then sum/mean/max/logsumexp/softmax over the features), drafted from
kernels/mm_reduce.py.j2, and its configurations.

Each program owns BLOCK_M rows of the product and walks its N columns in BLOCK_N-wide chunks,
reducing as it goes (the rowwise template's looped form, agent.builtin.emitter): any N, no
workspace across programs, so the reduction order is fixed. A chunk's product values come from
one of two places:

- `fused`: the program computes them itself (a K loop of dots per chunk). One kernel, nothing
  written but the output; the product is computed once per pass over the row (twice when the
  output is the full normalized row, as softmax's). Parallel over rows only, so it is the default
  when the rows alone fill the GPU, or the problem is small;
- two passes: `partial_product_kernel` writes the product in float32 tiles (all of the GPU busy;
  K split into SPLIT_K chunks when the tiles are too few), and the row kernel adds each chunk's
  partial products in order, then reduces. The product's M x N floats are written and read once.

Under float32 the dots are IEEE (input_precision="ieee"): never TF32 for float32 data.
"""
from __future__ import annotations

import math
from typing import Any

from agent.builtin.emitter import Emitter
from agent.builtin.indexing import Group
from agent.builtin.ir import Plan, Problem, Unrecognized
from agent.builtin.configs import unique
from agent.builtin.registry import Family, register
from agent.builtin.templates import Context, common_variables, render, store_value


def render_mm_reduce(plan: Plan, problem: Problem, config: dict[str, Any], ctx: Context) -> str:
    mm = next(n for n in plan.nodes if n.op == "mm")
    a, b = (plan.leaves[r[1]] for r in mm.args)
    if a.dtype != b.dtype:
        raise Unrecognized(f"a matrix product of {a.dtype} and {b.dtype}")
    (m, n), k = mm.shape, a.shape[1]
    fused = bool(config["fused"])
    precision = "ieee" if a.dtype == "torch.float32" else None
    setup = ["cols = n0 + tl.arange(0, BLOCK_N)", f"cmask = cols < {n}", "mask = rmask[:, None] & cmask[None, :]",
             "acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)"]
    if fused:
        dot = f'acc = tl.dot(a, b, acc, input_precision="{precision}")' if precision else "acc = tl.dot(a, b, acc)"
        setup += [f"rbn = cols % {n}",  # a modulo keeps the columns' contiguity visible (vector loads)
                  f"for k0 in range(0, {k}, BLOCK_K):",
                  "    kk = k0 + rk",
                  f"    a = tl.load(in{mm.args[0][1]}_ptr + ram[:, None] * stride_am + kk[None, :] * stride_ak, "
                  f"mask=kk[None, :] < {k}, other=0.0)",
                  f"    b = tl.load(in{mm.args[1][1]}_ptr + kk[:, None] * stride_bk + rbn[None, :] * stride_bn, "
                  f"mask=kk[:, None] < {k}, other=0.0)",
                  f"    {dot}"]
    else:  # the chunk's partial products, added in chunk order
        setup += [f"partial_ptrs = partial_ptr + rows[:, None] * {n} + cols[None, :]",
                  "for s in range(0, n_split):",
                  "    acc += tl.load(partial_ptrs, mask=mask, other=0.0)",
                  f"    partial_ptrs += {m * n}"]
    spaces = {"full": [Group(m, "rows", "rmask", "[:, None]"), Group(n, "cols", "cmask", "[None, :]")],
              "row": [Group(m, "rows", "rmask", "[:, None]")]}
    loop = {"tile": "[BLOCK_M, BLOCK_N]", "mask": "mask", "header": f"for n0 in range(0, {n}, BLOCK_N):",
            "setup": setup}
    em = Emitter(plan, spaces, reduce_group=1, looped=True, loop=loop, acc="acc")
    out = plan.nodes[plan.out]
    out_full = math.prod(out.shape) == m * n
    final: list[str] = []
    if out_full:  # normalized rows (softmax): a last pass over the chunks writes them
        saved = em.body
        em.body, em.full_memo = [], {}
        value, present = em.gen(("node", plan.out), "full", tuple(out.shape))
        final = em.body + [f"tl.store(out_ptr + rows[:, None] * {n} + cols[None, :], "
                           f"{store_value(value, present, 2, '[BLOCK_M, BLOCK_N]')}.to(out_ptr.dtype.element_ty), "
                           f"mask=mask)"]
        em.body = saved
    elif math.prod(out.shape) == m:
        value, present = em.gen(("node", plan.out), "row", tuple(out.shape))
        em.outer.append(f"tl.store(out_ptr + rows[:, None], {store_value(value, present, 1, '[BLOCK_M, 1]')}"
                        f".to(out_ptr.dtype.element_ty), mask=rmask[:, None])")
    else:
        raise Unrecognized(f"an output of {math.prod(out.shape)} elements from a {m}x{n} product reduced over its rows")
    return render("mm_reduce.py.j2", body=em.outer, setup=setup, final=final, out_full=out_full, fused=fused,
                  m=m, n=n, k=k, a_index=mm.args[0][1], b_index=mm.args[1][1], precision=precision,
                  row_block=config["BLOCK_M"] if fused else config["ROWS"],
                  **common_variables(plan, problem, config, ctx))


def mm_reduce_space(plan: Plan) -> list[dict[str, Any]]:
    """Two-pass configurations (the product's tiles as the matmul template orders them, K split when
    the tiles are too few; then rows per program and chunk width for the row pass) and fused ones
    (BLOCK_M rows of at least 16 for the dots); the fused first when its row blocks fill the GPU
    or the whole product is small."""
    from agent.builtin.configs import SMEM_BYTES, SMS, pow2
    from agent.builtin.matmul import MATMUL_CONFIGS
    from agent.builtin.skinny import split_k

    mm = next(n for n in plan.nodes if n.op == "mm")
    a = plan.leaves[mm.args[0][1]]
    (m, n), k = mm.shape, a.shape[1]
    size = 4 if a.dtype == "torch.float32" else 2
    two_pass: list[dict[str, Any]] = []
    rows, chunk = (1, min(pow2(n), 2048)) if m >= 2 * SMS else (1, min(pow2(n), 1024))
    for bm, bn, bk, g, w, s in MATMUL_CONFIGS:
        bm, bn, bk = min(bm, max(16, pow2(m))), min(bn, max(16, pow2(n))), min(bk, max(16, pow2(k)))
        if size == 4 and bk > 32 and bm * bn >= 128 * 256:
            bk = 32
        if (bm * bk + bk * bn) * size * s > SMEM_BYTES:
            continue
        split = split_k(math.ceil(m / bm) * math.ceil(n / bn), k, bk)
        two_pass.append({"fused": False, "BLOCK_M": bm, "BLOCK_N": bn, "BLOCK_K": bk, "GROUP_M": g, "num_warps": w,
                         "num_stages": s, "SPLIT_K": split, "ROWS": rows, "BLOCK_R": max(16, chunk),
                         "row_warps": 4 if chunk <= 1024 else 8})
    two_pass = unique(two_pass)
    filling = [c for c in two_pass if math.ceil(m / c["BLOCK_M"]) * math.ceil(n / c["BLOCK_N"]) * c["SPLIT_K"] >= SMS]
    first = filling[0] if filling else two_pass[0]
    two_pass = [first] + [c for c in two_pass if c is not first]
    fused = []
    for bm, bn, bk, w in ((16, 64, 32, 4), (32, 64, 32, 4), (64, 64, 32, 4), (16, 128, 32, 4), (64, 128, 32, 8),
                          (128, 64, 32, 8)):
        bm, bn, bk = min(bm, max(16, pow2(m))), min(bn, max(16, pow2(n))), min(bk, max(16, pow2(k)))
        fused.append({"fused": True, "BLOCK_M": bm, "BLOCK_N": bn, "BLOCK_K": bk, "num_warps": w, "num_stages": 2})
    fused = unique(fused)
    small = m * n * k <= 1 << 22
    rows_fill = [c for c in fused if math.ceil(m / c["BLOCK_M"]) >= SMS]
    if small or rows_fill:
        lead = max(rows_fill, key=lambda c: c["BLOCK_M"] * c["BLOCK_N"]) if rows_fill and not small else fused[0]
        return unique([lead] + two_pass[:1] + fused + two_pass)
    return unique(two_pass[:1] + fused[:1] + two_pass[1:] + fused[1:])


FAMILY = register(Family(kind="mm_reduce", render=render_mm_reduce, space=mm_reduce_space))
