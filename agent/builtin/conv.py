"""Convolution (conv1d/2d/3d and the transposed conv_transpose1d/2d/3d) as an implicit GEMM, with an
elementwise epilogue (template kernels/conv.py.j2; lowering in agent.builtin.conv_lower). See
docs/builtin-conv.md.

The product is out[(n, od, oh, ow), co] = sum over k = (c, kd, kh, kw) of x[n, g*CG + c, id, ih, iw]
* w[co, k]: M = N*OD*OH*OW output positions by N = C_out/groups channels, K = C_in/groups * KD*KH*KW
(a 1-d or 2-d convolution is a 3-d one over depth and height of one). A program owns a
[BLOCK_M, BLOCK_N] tile of one group (grid axis 2); the K loop gathers the input with computed
indices (padding and the tile's edges are masked loads of zero) and reads the weight as [C_out, K];
float32 accumulation with tl.dot. A transposed convolution gathers too: its input position is
i = (o + padding - k*dilation) / stride where that division is exact and in range (else a masked
zero), and its weight [C_in, C_out/groups, K...] is read accordingly; with a stride above 1 the space
starts with the stride-phase kernel (configuration "phases"): one phase o = a + q*S per program,
only the taps that land on an input (a table forward computes). Every size - batch, channels,
spatial sizes, kernel size, stride, padding, output_padding, dilation, groups - reaches the kernel
at run time (the settings from the model's Conv (ConvTranspose) module when it has exactly one with
the traced settings, else the traced values written in forward); only the tile sizes, warps and
stages are constants.

A depthwise forward convolution (one input channel per group) is first drafted as a direct kernel
instead (configuration "direct"): BLOCK_M positions x BLOCK_N channels per program, a loop over the
taps with float32 FMAs; the grouped GEMM's configurations come after it.

Precision: under float32 the dot is "ieee" or "tf32x3" (three TF32 products, about float32's
accuracy), never plain TF32; the configuration records it. Half types use the native dot.

The epilogue is any elementwise chain on the convolution's output (bias, scaling, clamps,
activations, batch norm in inference mode, which lowers to a per-channel scale and shift).
Reductions over the output after it (group/instance norm, softmax over channels, a global mean: a
reduction across programs) are a second kernel: agent.builtin.conv_reduce (classify hands them
over). Declined: a second convolution, a pooling after it, elementwise work before it.
"""
from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from agent.builtin.emitter import Emitter
from agent.builtin.indexing import Group
from agent.builtin.registry import Family, family, register
from agent.builtin.ir import FLOAT_DTYPES, Leaf, Node, Plan, Problem, Unrecognized
from agent.builtin.configs import SMEM_BYTES, SMS, dots, pow2, unique
from agent.builtin.templates import Context, common_variables, local_name, store_value
from agent.builtin.templates import render as render_template
from agent.builtin.window import downstream, epilogue_names

# BLOCK_M, BLOCK_N, BLOCK_K, num_warps, num_stages (BLOCK_N and BLOCK_K clamped to the problem)
TILES = ((128, 128, 32, 8, 3), (128, 64, 32, 4, 3), (64, 128, 32, 4, 3), (64, 64, 32, 4, 3), (128, 32, 32, 4, 3),
         (32, 64, 32, 4, 3), (64, 32, 32, 2, 3), (32, 32, 32, 2, 2), (16, 32, 32, 2, 2), (128, 128, 64, 8, 2),
         (64, 64, 64, 4, 2))
# the depthwise direct kernel: BLOCK_M positions, BLOCK_N channels, num_warps
DIRECT_TILES = ((128, 32, 4), (256, 16, 4), (64, 64, 4), (256, 32, 8), (128, 64, 8), (512, 8, 4), (64, 32, 2),
                (32, 32, 2))


def classify(leaves: list[Leaf], nodes: list[Node], out: int, out_glue, out_shape, out_dtype) -> Plan:
    convs = [i for i, n in enumerate(nodes) if n.op == "conv"]
    if len(convs) > 1:
        raise Unrecognized(f"{len(convs)} convolutions in one forward (one kernel convolves once)")
    index = convs[0]
    conv = nodes[index]
    after = downstream(nodes, index)
    reductions = sorted(i for i in after if nodes[i].op == "reduce")
    if reductions:  # a second kernel reduces the convolution's output (agent.builtin.conv_reduce)
        reduce = family("conv_reduce").classify  # agent.builtin.conv_reduce, which builds on this module
        assert reduce is not None
        return reduce(leaves, nodes, out, out_glue, out_shape, out_dtype)
    other = sorted({n.attrs.get("pattern") or n.op for i, n in enumerate(nodes) if i != index and n.op != "ew"})
    if other:
        raise Unrecognized(f"a {other[0]} with the convolution (one kernel convolves, then works elementwise)")
    x, w = conv.args
    if x[0] != "leaf" or w[0] != "leaf":
        raise Unrecognized("a convolution of a computed input or weight (elementwise work before it)")
    dtype = leaves[x[1]].dtype
    if dtype not in FLOAT_DTYPES or dtype == "torch.float64":
        raise Unrecognized(f"a convolution of a {dtype} tensor")
    if leaves[w[1]].dtype != dtype:
        raise Unrecognized(f"a convolution of a {dtype} input with a {leaves[w[1]].dtype} weight")
    if out != index and (out not in after or nodes[out].shape != conv.shape):
        raise Unrecognized("an output that is not the convolution's (or an elementwise function of it)")
    if out_dtype not in FLOAT_DTYPES or out_dtype == "torch.float64":
        raise Unrecognized(f"the output is {out_dtype}")
    a = conv.attrs
    weight = leaves[w[1]].shape
    kernel = "x".join(map(str, weight[2:]))
    settings = [f"{k} {_text(a[k])}" for k, plain in (("stride", 1), ("padding", 0), ("output_padding", 0),
                                                      ("dilation", 1)) if any(v != plain for v in a.get(k, ()))]
    c_in = leaves[x[1]].shape[1]
    if a["groups"] > 1:
        settings.append("depthwise" if a["groups"] == c_in else f"groups {a['groups']}")
    summary = (f"{a['pattern']} {kernel}{' (' + ', '.join(settings) + ')' if settings else ''} of "
               f"{'x'.join(map(str, leaves[x[1]].shape))} to {'x'.join(map(str, conv.shape))} (implicit GEMM "
               f"M={_gemm(conv, weight)[0]} N={_gemm(conv, weight)[1]} K={_gemm(conv, weight)[2]})"
               + epilogue_names(nodes, after))
    return Plan(kind="conv", leaves=leaves, nodes=nodes, out=out, out_glue=out_glue, out_shape=out_shape,
                out_dtype=out_dtype, full_shape=conv.shape, red_dims=(), summary=summary)


def _text(values: tuple[int, ...]) -> str:
    return str(values[0]) if len(set(values)) == 1 else "x".join(map(str, values))


def _gemm(conv: Node, weight: tuple[int, ...]) -> tuple[int, int, int]:
    """(M, N, K) of the implicit GEMM of one group (a transposed weight is [C_in, C_out/groups, K...])."""
    m, groups = conv.shape[0] * math.prod(conv.shape[2:]), conv.attrs["groups"]
    if conv.attrs.get("transposed"):
        return m, weight[1], weight[0] // groups * math.prod(weight[2:])
    return m, weight[0] // groups, math.prod(weight[1:])


def _conv(plan: Plan) -> tuple[int, Node]:
    index = next(i for i, n in enumerate(plan.nodes) if n.op == "conv")
    return index, plan.nodes[index]


def render(plan: Plan, problem: Problem, config: dict[str, Any], ctx: Context) -> str:
    index, conv = _conv(plan)
    a = conv.attrs
    n = a["dims"]
    x_index, w_index = conv.args[0][1], conv.args[1][1]
    shape = conv.shape
    groups = [Group(shape[0], "n_idx", "mmask", "[:, None]"), Group(shape[1], "co", "cmask", "[None, :]"),
              Group(math.prod(shape[2:]), "sp", "mmask", "[:, None]")]
    em = Emitter(plan, {"full": groups}, values={index: "acc"})
    value, present = em.gen(("node", plan.out), "full", tuple(plan.nodes[plan.out].shape))
    value = store_value(value, present, len(groups), "[BLOCK_M, BLOCK_N]")
    direct = bool(config.get("direct"))
    transposed = bool(a.get("transposed"))
    phases = bool(config.get("phases"))
    if phases and not transposed:
        raise Unrecognized("stride phases for a forward convolution (a transposed one's decomposition)")
    if direct and (transposed or plan.leaves[w_index].shape[1] != 1):
        raise Unrecognized("the direct kernel for a convolution with more than one input channel per group")
    precision = None
    if plan.leaves[x_index].dtype == "torch.float32":
        precision = config.get("precision")
        allowed = dots(plan)  # plain TF32 only under the tf32 precision: it is not float32's accuracy
        if precision not in allowed or (direct and precision != "ieee"):
            raise Unrecognized(f"a float32 convolution with dot precision {precision!r} under {plan.precision} "
                               f"({', '.join(allowed)} only)")
    names = {k: local_name(f"conv_{k}", problem) for k in ("in_sizes", "out_sizes", "kernel", "stride", "padding",
                                                             "dilation", "groups", "rows", "oc", "cg", "ocg",
                                                             "phases", "phase_rows")}
    module = a["module"]
    keys = ("stride", "padding", "dilation", "groups") + (("output_padding",) if transposed else ())
    if module is not None:
        settings = {k: f"{module}.{k}" for k in keys}
    else:
        settings = {k: repr(a[k]) for k in keys}
    variables = common_variables(plan, problem, config, ctx)
    variables["offset_limit"] = None  # batch offsets are int64 in the kernel; forward bounds an image's
    variables["out_alloc"] = f"(in{x_index}.shape[0], {names['oc']}, *{names['out_sizes']}[{3 - n}:])"
    return render_template("conv.py.j2", body=em.outer, result=value, x_index=x_index, w_index=w_index, names=names,
                           settings=settings, precision=precision, direct=direct, transposed=transposed, phases=phases,
                           dims=n, **variables)


# --- the search space ----------------------------------------------------------------------------


def space(plan: Plan) -> list[dict[str, Any]]:
    """Tiles from the implicit GEMM's M, N, K (BLOCK_N and BLOCK_K no larger than N and K rounded
    up to a power of two, at least 16 for tl.dot); pipelined tiles that fit in shared memory; the
    largest tile that still gives every SM a program first (else the one with the most programs);
    under float32 each tile with tf32x3, then each with ieee. A transposed convolution with a
    stride above 1 starts with the stride-phase kernel's tiles (its M and K divided by the phases),
    then the plain gather's."""
    index, conv = _conv(plan)
    weight = plan.leaves[conv.args[1][1]]
    m, n, k = _gemm(conv, weight.shape)
    groups = conv.attrs["groups"]
    gemm = _gemm_space(m, n, k, groups, weight.dtype, dots(plan))
    if conv.attrs.get("transposed"):
        stride = conv.attrs["stride"]
        if math.prod(stride) == 1:
            return gemm
        taps = math.prod(math.ceil(t / s) for t, s in zip(weight.shape[2:], stride))
        phases = _gemm_space(math.ceil(m / math.prod(stride)), n, k // math.prod(weight.shape[2:]) * taps,
                             groups * math.prod(stride), weight.dtype, dots(plan))
        return unique([{**c, "phases": True} for c in phases] + gemm)
    if weight.shape[1] != 1:
        return gemm
    return unique(_direct_space(plan, m, weight) + gemm)  # depthwise: the direct kernel first


def _gemm_space(m: int, n: int, k: int, programs_per_tile: int, dtype: str,
                precisions: tuple[str, ...]) -> list[dict[str, Any]]:
    """The implicit GEMM's tiles for M x N x K (programs_per_tile: groups, times phases); under
    float32 each tile with each of `precisions` (the run's dots, agent.builtin.configs.dots)."""
    size = 4 if dtype == "torch.float32" else 2
    configs = []
    for bm, bn, bk, w, s in TILES:
        bm, bn, bk = min(bm, max(16, pow2(m))), min(bn, max(16, pow2(n))), min(bk, max(16, pow2(k)))
        if size == 2 and bk == 32 and k >= 64:
            bk = 64  # half types: twice the K per stage in the same shared memory
        if (bm * bk + bk * bn) * size * s > SMEM_BYTES:
            continue  # more shared memory than an H100/H200 SM has for one program
        configs.append({"BLOCK_M": bm, "BLOCK_N": bn, "BLOCK_K": bk, "num_warps": w, "num_stages": s})
    configs = unique(configs)

    def programs(c: dict[str, Any]) -> int:
        return programs_per_tile * math.ceil(m / c["BLOCK_M"]) * math.ceil(n / c["BLOCK_N"])

    gemm = _filling_first(configs, programs)
    if dtype == "torch.float32":
        gemm = [{**c, "precision": p} for p in precisions for c in gemm]
    return unique(gemm)


def _filling_first(configs: list[dict[str, Any]], programs: Callable[[dict[str, Any]], int]) -> list[dict[str, Any]]:
    """The largest tile (in the list's order) that gives every SM a program first; without one,
    the tile with the most programs."""
    filling = [c for c in configs if programs(c) >= SMS]
    first = filling[0] if filling else max(configs, key=lambda c: (programs(c), -c["BLOCK_M"] * c["BLOCK_N"]))
    return [first] + [c for c in configs if c is not first]


def _direct_space(plan: Plan, m: int, weight: Leaf) -> list[dict[str, Any]]:
    """The depthwise kernel's tiles: positions (contiguous in memory, so long) by channels; float32
    FMAs, recorded as "ieee" under float32."""
    channels = weight.shape[0]
    configs = []
    for bm, bn, w in DIRECT_TILES:
        bm, bn = min(bm, max(16, pow2(m))), min(bn, pow2(channels))
        configs.append({"direct": True, "BLOCK_M": bm, "BLOCK_N": bn, "num_warps": w})
    configs = _filling_first(unique(configs),
                             lambda c: math.ceil(m / c["BLOCK_M"]) * math.ceil(channels / c["BLOCK_N"]))
    if weight.dtype == "torch.float32":
        configs = [{**c, "precision": "ieee"} for c in configs]
    return configs


FAMILY = register(Family(kind="conv", render=render, space=space, claims=('conv',), classify=classify, rank=0))
