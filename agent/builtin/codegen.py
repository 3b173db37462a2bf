"""Drafting: from a recognized plan (agent.builtin.recognize) and a kernel configuration
(agent.builtin.search) to a candidate module, rendered from the Jinja templates in kernels/.

The templates hold each kernel's structure (program ids, tiles, masks, loops, the K loop and
GROUP_M swizzle of the matrix product, the launch). This module fills in, for each kind of plan,
the index spaces of its tile and the statements the emitter (agent.builtin.emitter) generates for
them: the elementwise expressions of the fused prologue/epilogue, the loads of each operand with
its broadcast index, the reductions; the one store converts to the output's dtype. `draft` hands the
rendering to agent.builtin.general, which makes the module general over what a user varies.
"""
from __future__ import annotations

import math
from typing import Any

from agent.builtin.emitter import Emitter
from agent.builtin.indexing import Group
from agent.builtin.ir import Plan, Problem, Unrecognized
from agent.builtin.templates import Context, common_variables, render, store_value
from agent.builtin.window import kinds

FEW_ROWS, LONG_ROW = 64, 32768  # rowwise: fewer rows than this, each at least this long, is declined


def draft(plan: Plan, problem: Problem, config: dict[str, Any]) -> str:
    """The candidate module for a plan and a configuration."""
    from agent.builtin.general import draft_general

    return draft_general(plan, problem, config, render_plan)


def render_plan(plan: Plan, problem: Problem, config: dict[str, Any], ctx: Context) -> str:
    """One rendering of the module for a plan (the problem's, or one traced at other sizes)."""
    if plan.kind == "rowwise" and config.get("split"):  # rows split across programs (agent.builtin.split)
        from agent.builtin.split import render_split

        return render_split(plan, problem, config, ctx)
    if plan.kind == "twolevel":  # row reductions, then a global one (agent.builtin.twolevel)
        from agent.builtin.twolevel import render_two_level

        return render_two_level(plan, problem, config, ctx)
    from agent.builtin.gemv import render_gemv
    from agent.builtin.mm_reduce import render_mm_reduce

    makers = {"pointwise": _pointwise, "rowwise": _rowwise, "colwise": _colwise, "matmul": _matmul,
              "gemv": render_gemv, "mm_reduce": render_mm_reduce}
    if plan.kind not in makers:  # pool, scan, argreduce (agent.builtin.window)
        return kinds()[plan.kind].render(plan, problem, config, ctx)
    return makers[plan.kind](plan, problem, config, ctx)


def _pointwise(plan: Plan, problem: Problem, config: dict[str, Any], ctx: Context) -> str:
    out = plan.nodes[plan.out]
    total = math.prod(out.shape)
    spaces = {"full": [Group(total, "offs", "mask", "")]}
    em = Emitter(plan, spaces)
    value, present = em.gen(("node", plan.out), "full", tuple(out.shape))
    value = store_value(value, present, 1, "[BLOCK]")
    return render("pointwise.py.j2", body=em.outer, result=value,
                  **common_variables(plan, problem, config, ctx))


def _rowwise(plan: Plan, problem: Problem, config: dict[str, Any], ctx: Context) -> str:
    full = tuple(plan.full_shape)
    d0 = plan.red_dims[0]
    rows, width = math.prod(full[:d0]), math.prod(full[d0:])
    looped = bool(config["looped"])
    if ctx.strict and rows < FEW_ROWS and width >= LONG_ROW:
        # one program per row would leave most of the GPU idle: the split configurations take these
        # (agent.builtin.split; search.space offers only those for such rows)
        raise Unrecognized(f"{rows} rows of {width} elements for one program per row (a split configuration "
                           "reduces them)")
    spaces = {"full": [Group(rows, "rows", "rmask", "[:, None]"), Group(width, "cols", "cmask", "[None, :]")],
              "row": [Group(rows, "rows", "rmask", "[:, None]")]}
    loop = {"tile": "[BLOCK_M, BLOCK_R]", "mask": "mask", "header": f"for r0 in range(0, {width}, BLOCK_R):",
            "setup": ["cols = r0 + tl.arange(0, BLOCK_R)", f"cmask = cols < {width}",
                      "mask = rmask[:, None] & cmask[None, :]"]}
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


def _colwise(plan: Plan, problem: Problem, config: dict[str, Any], ctx: Context) -> str:
    full = tuple(plan.full_shape)
    d0, d1 = plan.red_dims[0], plan.red_dims[-1]
    outer, red, inner = math.prod(full[:d0]), math.prod(full[d0:d1 + 1]), math.prod(full[d1 + 1:])
    spaces = {"full": [Group(outer, "pid_m", None, ""), Group(red, "r_idx", "r_mask", "[:, None]"),
                       Group(inner, "n_idx", "n_mask", "[None, :]")],
              "row": [Group(outer, "pid_m", None, ""), Group(inner, "n_idx", "n_mask", "[None, :]")]}
    loop = {"tile": "[BLOCK_R, BLOCK_N]", "mask": "mask", "header": f"for r0 in range(0, {red}, BLOCK_R):",
            "setup": ["r_idx = r0 + tl.arange(0, BLOCK_R)", f"r_mask = r_idx < {red}",
                      "mask = r_mask[:, None] & n_mask[None, :]"]}
    em = Emitter(plan, spaces, reduce_group=1, looped=True, loop=loop)
    out = plan.nodes[plan.out]
    final: list[str] = []
    out_full = math.prod(out.shape) == outer * red * inner
    if out_full:  # normalized over the middle dims (softmax, RMS norm over channels): a last loop writes
        saved = em.body
        em.body, em.full_memo = [], {}
        value, present = em.gen(("node", plan.out), "full", tuple(out.shape))
        final = em.body + [f"tl.store(out_ptr + pid_m * {red * inner} + r_idx[:, None] * {inner} + n_idx[None, :], "
                           f"{store_value(value, present, 3, '[BLOCK_R, BLOCK_N]')}.to(out_ptr.dtype.element_ty), "
                           f"mask=mask)"]
        em.body = saved
    elif math.prod(out.shape) == outer * inner:
        value, present = em.gen(("node", plan.out), "row", tuple(out.shape))
        em.outer.append(f"tl.store(out_ptr + pid_m * {inner} + n_idx[None, :], "
                        f"{store_value(value, present, 2, '[1, BLOCK_N]')}.to(out_ptr.dtype.element_ty), "
                        f"mask=n_mask[None, :])")
    else:
        raise Unrecognized(f"an output of {math.prod(out.shape)} elements from a reduction of {list(full)}")
    return render("colwise.py.j2", body=em.outer, final=final, out_full=out_full, outer=outer, red=red, inner=inner,
                  **common_variables(plan, problem, config, ctx))


def _matmul(plan: Plan, problem: Problem, config: dict[str, Any], ctx: Context) -> str:
    if int(config.get("SPLIT_K", 1)) > 1:  # too few output tiles for a long K (agent.builtin.skinny)
        from agent.builtin.skinny import render_splitk

        return render_splitk(plan, problem, config, ctx)
    mm_index = next(i for i, n in enumerate(plan.nodes) if n.op == "mm")
    mm = plan.nodes[mm_index]
    a, b = (plan.leaves[r[1]] for r in mm.args)
    if a.dtype != b.dtype:
        raise Unrecognized(f"a matrix product of {a.dtype} and {b.dtype}")
    batched = mm.name == "bmm"
    if batched:
        batch, m, k = a.shape
        n = b.shape[2]
    else:
        batch, (m, k), n = 1, a.shape, b.shape[1]
    out = plan.nodes[plan.out]
    rows = batch * m
    spaces = {"full": [Group(rows, "rows", "mmask", "[:, None]"), Group(n, "rn", "nmask", "[None, :]")]}
    em = Emitter(plan, spaces, acc="acc")
    if math.prod(out.shape) != rows * n:
        raise Unrecognized("the epilogue changes the product's size")
    value, present = em.gen(("node", plan.out), "full", tuple(out.shape))
    value = store_value(value, present, 2, "[BLOCK_M, BLOCK_N]")
    a_idx, b_idx = mm.args[0][1], mm.args[1][1]
    precision = config.get("precision", "ieee")
    if a.dtype != "torch.float32":
        precision = None
    return render("matmul.py.j2", body=em.outer, result=value, batched=batched, batch=batch, m=m, n=n, k=k,
                  a_index=a_idx, b_index=b_idx, a_strides=a.strides, b_strides=b.strides, precision=precision,
                  **common_variables(plan, problem, config, ctx))
