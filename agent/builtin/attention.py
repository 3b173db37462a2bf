"""The `attention` plan kind: scaled dot-product attention as one fused flash-attention kernel
(template kernels/attention.py.j2), recognized by agent.builtin.attention_match.

One program per (batch x head, BLOCK_M query rows) loads its q block once and walks the keys and
values in BLOCK_N blocks: s = q kᵀ * scale, an online softmax (running max, running sum, the
accumulator rescaled when the max grows) in the log2 domain with the scale folded into one factor,
acc += p v, and last acc / l. The scores never reach memory. Causal attention skips the key blocks
wholly above the diagonal and masks the diagonal one (top-left aligned, as torch's is_causal).

Batch, heads, sequence lengths, head dims and every stride are run-time arguments (masks on the
rows, keys and head dims), so the kept kernel serves other batch sizes and sequence lengths; the
head dims are padded to powers of two (BLOCK_D, BLOCK_DV, at least 16 for the dots).

Precision, by construction: float32 data never meets plain TF32. Each dot is "ieee" or "tf32x3"
(three TF32 products, float32-accurate), the configuration records which ("precision") and the
draft's docstring says it; float16/bfloat16 use the native dot, p cast to v's dtype before the
second one. Accumulation is float32 in every case.
"""
from __future__ import annotations

import math
from typing import Any

from agent.builtin.attention_match import match
from agent.builtin.registry import Family, register
from agent.builtin.ir import Leaf, Node, Plan, Problem, Unrecognized
from agent.builtin.configs import SMEM_BYTES, SMS, dots, pow2, unique
from agent.builtin.templates import Context, common_variables
from agent.builtin.templates import render as render_template

# (BLOCK_M, BLOCK_N, num_warps, num_stages) by head dim: larger head dims take smaller key blocks
TILES = {64: [(128, 64, 4, 3), (128, 128, 8, 3), (64, 64, 4, 3), (128, 32, 4, 3), (64, 32, 4, 2), (32, 32, 4, 2),
              (16, 16, 4, 2)],
         128: [(128, 64, 8, 3), (128, 32, 8, 2), (64, 64, 4, 3), (64, 32, 4, 2), (32, 32, 4, 2), (16, 16, 4, 2)],
         256: [(64, 32, 4, 2), (64, 64, 8, 2), (32, 32, 4, 2), (16, 16, 4, 2)]}


def classify(leaves: list[Leaf], nodes: list[Node], out: int, out_glue, out_shape, out_dtype) -> Plan:
    """Not reached: attention is matched on the aten graph (agent.builtin.attention_match)."""
    raise Unrecognized("attention is recognized on the traced graph, not from the IR")


def _attention(plan: Plan) -> tuple[Node, Leaf, Leaf, Leaf]:
    node = plan.nodes[plan.out]
    q, k, v = (plan.leaves[a[1]] for a in node.args[:3])  # a fourth: the mask tensor, if any
    return node, q, k, v


def precision_of(plan: Plan, config: dict[str, Any]) -> str | None:
    """The dots' input_precision: None (native) for half types; for float32 one of the run's
    (agent.builtin.configs.dots: "tf32x3" or "ieee", and "tf32" under the tf32 precision)."""
    _, q, _, _ = _attention(plan)
    if q.dtype != "torch.float32":
        return None
    precision = config.get("precision", "ieee")
    if precision not in dots(plan):
        raise Unrecognized(f"input_precision {precision!r} for float32 attention under {plan.precision} "
                           f"(only {', '.join(dots(plan))})")
    return precision


def render(plan: Plan, problem: Problem, config: dict[str, Any], ctx: Context) -> str:
    node, q, k, v = _attention(plan)
    if len({q.dtype, k.dtype, v.dtype}) != 1:
        raise Unrecognized(f"attention over {q.dtype}, {k.dtype} and {v.dtype}")
    precision = precision_of(plan, config)

    def dot(a: str, b: str, acc: str | None = None) -> str:
        extra = f", {acc}" if acc else ""
        if precision is None:
            return f"tl.dot({a}, {b}{extra})"
        return f'tl.dot({a}, {b}{extra}, input_precision="{precision}")'

    if precision is None:
        note = f"the native {q.dtype.removeprefix('torch.')} dot, float32 accumulation; p cast to v's dtype."
    else:
        kind = {"ieee": "IEEE float32", "tf32x3": "3xTF32, float32-accurate",
                "tf32": "TF32, as the run's tf32 precision allows"}[precision]
        note = f'float32 data, input_precision="{precision}" ({kind})' + ("" if precision == "tf32" else "; never plain TF32") + "."
    variables = common_variables(plan, problem, config, ctx)
    variables["out_alloc"] = "(*in0.shape[:-1], in2.shape[-1])"
    variables["offset_limit"] = None  # batch and head offsets are int64, rows' offsets too
    variables["notes"] = list(variables["notes"]) + [f"Attention dots: {note}"]
    scale = float(node.attrs["scale"])
    if math.isclose(scale, q.shape[-1] ** -0.5, rel_tol=1e-9):
        # 1/sqrt(head dim) (sdpa's default, or written with k.size(-1)): read at run time, so the head
        # dim may vary; a constant that only equals it here renders differently at another head dim,
        # and agent.builtin.general then fixes the head dim instead
        qk_scale = f"head_dim ** -0.5 * {math.log2(math.e)!r}"
    else:
        qk_scale = repr(scale * math.log2(math.e))
    mask = node.attrs.get("mask")
    mask_code = {None: 0, "keep_nonzero": 1, "keep_zero": 2, "add": 3}[mask]
    mask_scale = repr(float(node.attrs.get("mask_factor", 1.0)) * math.log2(math.e))
    # the tile was chosen at this problem's head dims; wider heads (another model's) shrink it at
    # run time until it holds no more elements in shared memory than here, where it compiled
    # (the problem's head dims, also where agent.builtin.general renders the plan traced at others)
    q_parts = 2 if q.dtype == "torch.float32" else 1  # as _smem counts them: 3xTF32's two parts of q
    _, q0, _, v0 = _attention(ctx.origin or plan)
    tuned_elems = _smem(config["BLOCK_M"], config["BLOCK_N"], max(16, pow2(q0.shape[-1])), max(16, pow2(v0.shape[-1])),
                        1, config["num_stages"], split=q_parts == 2)
    return render_template("attention.py.j2", dot=dot, precision_note=note, causal=bool(node.attrs["causal"]),
                           qk_scale=qk_scale, mask=mask is not None, mask_code=mask_code, mask_scale=mask_scale,
                           safe=bool(node.attrs.get("safe", True)), tuned_elems=tuned_elems, q_parts=q_parts,
                           **variables)


# --- the search space ----------------------------------------------------------------------------


def space(plan: Plan) -> list[dict[str, Any]]:
    """Tiles by head dim (clipped to the sequence lengths, within shared memory), then the first
    one shrunk along BLOCK_M until every SM has a program; float32 spaces list each tile with
    tf32x3, then again with ieee."""
    node, q, k, v = _attention(plan)
    masked = node.attrs.get("mask") is not None
    batch = math.prod(q.shape[:-2])
    seq_q, d = q.shape[-2], q.shape[-1]
    seq_k, dv = k.shape[-2], v.shape[-1]
    fp32 = q.dtype == "torch.float32"
    size = 4 if fp32 else 2
    block_d, block_dv = max(16, pow2(d)), max(16, pow2(dv))
    widest = max(block_d, block_dv)
    tiles = TILES[64] if widest <= 64 else TILES[128] if widest <= 128 else TILES[256]
    configs = []
    for bm, bn, w, s in tiles:
        bm, bn = min(bm, max(16, pow2(seq_q))), min(bn, max(16, pow2(seq_k)))
        if fp32 and bm * bn >= 128 * 64 and widest >= 128:
            bn = min(bn, 32)  # float32 tiles take twice the shared memory and registers
        while bm > 16 and _smem(bm, bn, block_d, block_dv, size, s, fp32, masked) > SMEM_BYTES:
            bm //= 2
        if _smem(bm, bn, block_d, block_dv, size, s, fp32, masked) > SMEM_BYTES:
            continue
        if fp32 and bm * widest >= 128 * 64:
            w = max(w, 8)  # float32 q and accumulator tiles take twice the registers
        configs.append({"BLOCK_M": bm, "BLOCK_N": bn, "num_warps": w, "num_stages": s})
    configs = unique(configs)
    if not configs:
        raise Unrecognized(f"head dims {d}, {dv}: no attention tile fits in shared memory")
    first = dict(configs[0])
    while first["BLOCK_M"] > 16 and batch * math.ceil(seq_q / first["BLOCK_M"]) < SMS:
        first["BLOCK_M"] //= 2
        first["num_warps"] = min(first["num_warps"], 4)
    ordered = unique([first] + configs)
    if not fp32:
        return ordered
    return [{**c, "precision": p} for p in dots(plan) for c in ordered]


def _smem(bm: int, bn: int, block_d: int, block_dv: int, size: int, stages: int, split: bool = False,
          masked: bool = False) -> int:
    """Shared memory of one program: the q block once, k and v blocks per pipeline stage; with
    `split` (float32 data: 3xTF32 keeps q's high and low parts) the q block twice, and with a
    mask tensor one [BLOCK_M, BLOCK_N] tile of it. Calibrated on Triton's sm_90 compiles
    (tests/builtin/test_builtin_attention_compile.py): without the last two, fp32 tiles asked for up to
    262144 bytes where an H100 has 232448."""
    return (bm * block_d * (2 if split else 1) + stages * bn * (block_d + block_dv)) * size + (bm * bn * 4 if masked else 0)


FAMILY = register(Family(kind="attention", render=render, space=space, match=match))
