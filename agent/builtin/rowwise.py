"""The rowwise family: elementwise nodes and reductions over the same trailing dims of one shape
(softmax, log-softmax, layer/RMS norm, row reductions with elementwise epilogues), one program per
block of rows (kernels/rowwise.py.j2), or rows split across programs (agent.builtin.split)."""
from __future__ import annotations

import math
from typing import Any

from agent.builtin.configs import SMS, pow2, unique
from agent.builtin.emitter import Emitter
from agent.builtin.indexing import Group
from agent.builtin.ir import Plan, Problem, Unrecognized
from agent.builtin.registry import Family, register
from agent.builtin.split import render_split, split_first, split_space
from agent.builtin.templates import ONE_TILE_MAX, Context, common_variables, render, store_value

FEW_ROWS, LONG_ROW = 64, 32768  # fewer rows than this, each at least this long: only split configurations


def row_tile(rows: int, width: int) -> tuple[dict[str, list[Group]], dict[str, Any]]:
    """The index spaces of a block of rows and the loop over a row's width: the rowwise kernels'
    (and agent.builtin.twolevel's first stage)."""
    spaces = {"full": [Group(rows, "rows", "rmask", "[:, None]"), Group(width, "cols", "cmask", "[None, :]")],
              "row": [Group(rows, "rows", "rmask", "[:, None]")]}
    loop = {"tile": "[BLOCK_M, BLOCK_R]", "mask": "mask", "header": f"for r0 in range(0, {width}, BLOCK_R):",
            "setup": ["cols = r0 + tl.arange(0, BLOCK_R)", f"cmask = cols < {width}",
                      "mask = rmask[:, None] & cmask[None, :]"]}
    return spaces, loop


def render_rowwise(plan: Plan, problem: Problem, config: dict[str, Any], ctx: Context) -> str:
    full = tuple(plan.full_shape)
    d0 = plan.red_dims[0]
    rows, width = math.prod(full[:d0]), math.prod(full[d0:])
    looped = bool(config["looped"])
    if ctx.strict and rows < FEW_ROWS and width >= LONG_ROW:
        # one program per row would leave most of the GPU idle: the split configurations take these
        # (agent.builtin.split; search.space offers only those for such rows)
        raise Unrecognized(f"{rows} rows of {width} elements for one program per row (a split configuration "
                           "reduces them)")
    spaces, loop = row_tile(rows, width)
    em = Emitter(plan, spaces, reduce_group=1, looped=looped, loop=loop)
    out = plan.nodes[plan.out]
    out_full = math.prod(out.shape) == rows * width
    final: list[str] = []
    if out_full:
        if looped:
            saved = em.body
            em.body, em.full_memo = [], {}
            value, present = em.gen(("node", plan.out), "full", tuple(out.shape))
            final = em.body + [f"tl.store(out_ptr + rows{ '[:, None]' } * {width} + cols[None, :], "
                               f"{store_value(value, present, 2, '[BLOCK_M, BLOCK_R]')}"
                               f".to(out_ptr.dtype.element_ty), mask=mask)"]
            em.body = saved
        else:
            value, present = em.gen(("node", plan.out), "full", tuple(out.shape))
            em.outer.append(f"tl.store(out_ptr + rows[:, None] * {width} + cols[None, :], "
                            f"{store_value(value, present, 2, '[BLOCK_M, BLOCK_R]')}.to(out_ptr.dtype.element_ty), "
                            f"mask=mask)")
    else:
        if math.prod(out.shape) != rows:
            raise Unrecognized(f"an output of {math.prod(out.shape)} elements from rows of {rows} x {width}")
        value, present = em.gen(("node", plan.out), "row", tuple(out.shape))
        em.outer.append(f"tl.store(out_ptr + rows[:, None], {store_value(value, present, 1, '[BLOCK_M, 1]')}"
                        f".to(out_ptr.dtype.element_ty), mask=rmask[:, None])")
    return render("rowwise.py.j2", body=em.outer, final=final, looped=looped, out_full=out_full, rows=rows,
                  width=width, **common_variables(plan, problem, config, ctx))




def rowwise_space(plan: Plan) -> list[dict[str, Any]]:
    full = plan.full_shape
    d0 = plan.red_dims[0]
    rows, width = math.prod(full[:d0]), math.prod(full[d0:])
    configs = row_configs(rows, width)
    # rows split across programs (agent.builtin.split): first when the rows are too few to fill the
    # device, the only choice when the one-program-per-row kernels decline them
    splits = split_space(rows, width, SMS)
    if rows < FEW_ROWS and width >= LONG_ROW:
        return splits
    return unique(splits + configs if split_first(rows, width, SMS) else configs + splits)




def row_configs(rows: int, width: int) -> list[dict[str, Any]]:
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
            for w in warps_for(bm * p):
                configs.append({"looped": False, "BLOCK_M": bm, "BLOCK_R": p, "num_warps": w})
    if width > 1024:
        for br, w in ((4096, 8), (2048, 8), (8192, 16), (1024, 4), (4096, 16), (2048, 4)):
            if br < p:
                configs.append({"looped": True, "BLOCK_M": 1, "BLOCK_R": br, "num_warps": w})
    return unique(configs)




def warps_for(elements: int) -> list[int]:
    if elements <= 512:
        return [2, 4]
    if elements <= 2048:
        return [4, 8]
    if elements <= 8192:
        return [8, 4, 16]
    return [16, 8]


def render_rows(plan: Plan, problem: Problem, config: dict[str, Any], ctx: Context) -> str:
    """A split configuration's rendering (agent.builtin.split), else one program per block of rows."""
    if config.get("split"):
        return render_split(plan, problem, config, ctx)
    return render_rowwise(plan, problem, config, ctx)


FAMILY = register(Family(kind="rowwise", render=render_rows, space=rowwise_space))
