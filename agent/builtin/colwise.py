"""The colwise family: the rowwise kinds' reductions over a block of middle dims (a sum over dim 1
of [B, R, N], a softmax over channels): kernels/colwise.py.j2."""
from __future__ import annotations

import math
from typing import Any

from agent.builtin.configs import SMS, pow2, unique
from agent.builtin.emitter import Emitter
from agent.builtin.indexing import Group
from agent.builtin.ir import Plan, Problem, Unrecognized
from agent.builtin.registry import Family, register
from agent.builtin.templates import Context, common_variables, render, store_value

def render_colwise(plan: Plan, problem: Problem, config: dict[str, Any], ctx: Context) -> str:
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




def colwise_space(plan: Plan) -> list[dict[str, Any]]:
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


FAMILY = register(Family(kind="colwise", render=render_colwise, space=colwise_space))
