"""The matmul family: one matrix product of two leaves (mm, bmm, addmm, linear) followed by an
elementwise epilogue, tiled with a GROUP_M swizzle (kernels/matmul.py.j2); skinny shapes and
split-K (agent.builtin.skinny) are configurations of it."""
from __future__ import annotations

import math
from typing import Any

from agent.builtin.configs import SMEM_BYTES, SMS, dots, pow2, unique
from agent.builtin.emitter import Emitter
from agent.builtin.indexing import Group
from agent.builtin.ir import Plan, Problem, Unrecognized
from agent.builtin.registry import Family, register
from agent.builtin.skinny import render_splitk, shaped_first
from agent.builtin.templates import Context, common_variables, render, store_value

def render_matmul(plan: Plan, problem: Problem, config: dict[str, Any], ctx: Context) -> str:
    if int(config.get("SPLIT_K", 1)) > 1:  # too few output tiles for a long K (agent.builtin.skinny)
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


MATMUL_CONFIGS = (
    # BLOCK_M, BLOCK_N, BLOCK_K, GROUP_M, num_warps, num_stages
    (128, 128, 64, 8, 8, 3), (128, 256, 64, 8, 8, 3), (128, 128, 32, 8, 4, 4), (256, 128, 64, 8, 8, 3),
    (128, 64, 32, 8, 4, 4), (64, 128, 32, 8, 4, 4), (64, 256, 32, 8, 4, 4), (128, 128, 64, 4, 8, 4),
    (64, 64, 32, 8, 4, 4), (128, 32, 32, 8, 4, 4), (64, 32, 32, 8, 2, 5), (32, 64, 32, 8, 2, 5),
    (32, 32, 32, 4, 4, 2), (16, 64, 64, 4, 4, 3),
)


def matmul_space(plan: Plan) -> list[dict[str, Any]]:
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
    return shaped_first(plan, unique(out))  # skinny shapes and split-K first (agent.builtin.skinny)


FAMILY = register(Family(kind="matmul", render=render_matmul, space=matmul_space))
