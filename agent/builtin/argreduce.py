"""argmax / argmin over one dim, int64 indices as PyTorch gives them: the first index on ties, and
a NaN counts as the extreme (the first NaN wins). Template kernels/argreduce.py.j2.

The input (a leaf, or an elementwise prologue of leaves) is seen as [outer, reduced, inner].
Reducing the last dim (inner 1), a program takes BLOCK_M rows and walks the row in BLOCK_R-wide
tiles; reducing a middle dim, a program takes one outer index and BLOCK_N contiguous inner columns
and walks the reduced dim in BLOCK_R-long tiles (coalesced loads). Each lane of the tile keeps the
best value it saw and its index (a later index replaces it only when strictly better), and one
tl.reduce with a tie-breaking combine picks the winner across lanes at the end.
"""
from __future__ import annotations

import math
from typing import Any

from agent.builtin.emitter import Emitter
from agent.builtin.indexing import Group
from agent.builtin.registry import Family, register
from agent.builtin.ir import FLOAT_DTYPES, Leaf, Node, Plan, Problem, Unrecognized
from agent.builtin.configs import SMS, pow2, unique
from agent.builtin.templates import Context, common_variables, store_value
from agent.builtin.templates import render as render_template
from agent.builtin.window import upstream

OUT_DTYPE = "torch.int64"


def classify(leaves: list[Leaf], nodes: list[Node], out: int, out_glue, out_shape, out_dtype) -> Plan:
    found = [i for i, n in enumerate(nodes) if n.op == "argreduce"]
    if len(found) > 1:
        raise Unrecognized(f"{len(found)} arg-reductions in one forward")
    index = found[0]
    node = nodes[index]
    if out != index:
        raise Unrecognized(f"work after {node.name} (its int64 indices are the output of the kernel)")
    other = sorted({nodes[i].op for i in upstream(nodes, index)} - {"ew"})
    if other:
        raise Unrecognized(f"{node.name} of a {other[0]} result (only elementwise work may come first)")
    source = node.args[0]
    full = leaves[source[1]].shape if source[0] == "leaf" else nodes[source[1]].shape
    if source[0] == "leaf" and leaves[source[1]].dtype not in FLOAT_DTYPES:
        raise Unrecognized(f"{node.name} of a {leaves[source[1]].dtype} tensor")
    if out_dtype != OUT_DTYPE:
        raise Unrecognized(f"the output is {out_dtype}")
    dim = node.attrs["dims"][0]
    where = "the last dim" if dim == len(full) - 1 else f"dim {dim}"
    summary = f"{node.name} over {where} of {'x'.join(map(str, full))}"
    return Plan(kind="argreduce", leaves=leaves, nodes=nodes, out=out, out_glue=out_glue, out_shape=out_shape,
                out_dtype=out_dtype, full_shape=tuple(full), red_dims=(dim,), summary=summary)


def _split(plan: Plan) -> tuple[int, int, int]:
    full, d = plan.full_shape, plan.red_dims[0]
    return math.prod(full[:d]), full[d], math.prod(full[d + 1:])


def render(plan: Plan, problem: Problem, config: dict[str, Any], ctx: Context) -> str:
    node = plan.nodes[plan.out]
    outer, red, inner = _split(plan)
    rows = inner == 1
    if rows:
        groups = [Group(outer, "rows", "rmask", "[:, None]"), Group(red, "cols", "cmask", "[None, :]")]
        tile = "[BLOCK_M, BLOCK_R]"
    else:
        groups = [Group(outer, "pid_o", None, ""), Group(red, "r_idx", "r_mask", "[:, None]"),
                  Group(inner, "n_idx", "n_mask", "[None, :]")]
        tile = "[BLOCK_R, BLOCK_N]"
    em = Emitter(plan, {"full": groups})
    value, present = em.gen(node.args[0], "full", tuple(plan.full_shape))
    value = store_value(value, present, len(groups), tile)
    return render_template("argreduce.py.j2", body=em.outer, value=value, rows=rows, outer=outer, red=red,
                           inner=inner, largest=node.name == "argmax", **common_variables(plan, problem, config, ctx))


def space(plan: Plan) -> list[dict[str, Any]]:
    outer, red, inner = _split(plan)
    p = pow2(red)
    configs: list[dict[str, Any]] = []
    if inner == 1:
        if p <= 4096:
            bm = max(1, min(pow2(outer), 4096 // p))
            while bm > 1 and math.ceil(outer / bm) < 2 * SMS:
                bm //= 2
            for m in [bm] + [m for m in (1, 2, 4, 8, 16) if m != bm and m * p <= 8192 and m <= pow2(outer)]:
                configs.append({"BLOCK_M": m, "BLOCK_R": max(16, p), "num_warps": 2 if m * p <= 256 else 4 if m * p <= 2048 else 8})
        for br, w in ((2048, 8), (4096, 8), (1024, 4), (2048, 4), (8192, 16)):
            if br < p:
                configs.append({"BLOCK_M": 1, "BLOCK_R": br, "num_warps": w})
    else:
        bn = 128
        while bn > 16 and outer * math.ceil(inner / bn) < 2 * SMS:
            bn //= 2
        bn = min(bn, max(16, pow2(inner)))
        br = min(max(8, 4096 // bn), max(8, p), 64)
        configs.append({"BLOCK_R": br, "BLOCK_N": bn, "num_warps": 4})
        for r, n, w in ((32, 64, 4), (16, 128, 4), (64, 32, 4), (32, 128, 8), (64, 64, 8), (8, 256, 4)):
            configs.append({"BLOCK_R": min(r, max(8, p)), "BLOCK_N": min(n, max(16, pow2(inner))), "num_warps": w})
    return unique(configs)


FAMILY = register(Family(kind="argreduce", render=render, space=space, claims=('argreduce',), classify=classify, rank=3))
