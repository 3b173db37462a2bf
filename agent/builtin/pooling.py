"""Max and average pooling, 1-3 spatial dims (template kernels/pool.py.j2).

One output element per lane: a program covers a [BLOCK_H, BLOCK_W] tile of the last two output
dims of one plane (a (batch, channel) pair) at one output depth; the window is a loop over the
kernel taps (the kernel sizes are compile-time constants, so the taps along W unroll) with masked
loads: padding reads -inf for max (NaN propagates as in PyTorch), and average pooling divides by
the window as count_include_pad / divisor_override say. Everything the output's size depends on -
the input's sizes, the kernel size, stride, padding, dilation, ceil_mode - is read at run time:
from the model's pooling module when it has one (`self.pool.kernel_size`), so another kernel size
or stride is computed, never refused; else the forward's own settings (F.max_pool2d(x, 3)) are
written in. 1-d and 2-d pooling run as 3-d pooling with windows of one along the missing dims. An
elementwise epilogue is computed on the pooled value before the one store.
"""
from __future__ import annotations

import math
from typing import Any

from agent.builtin.emitter import Emitter
from agent.builtin.indexing import Group
from agent.builtin.registry import Family, register
from agent.builtin.ir import FLOAT_DTYPES, Leaf, Node, Plan, Problem, Unrecognized
from agent.builtin.configs import SMS, pow2
from agent.builtin.templates import Context, common_variables, local_name, store_value
from agent.builtin.templates import render as render_template
from agent.builtin.window import downstream, epilogue_names


def classify(leaves: list[Leaf], nodes: list[Node], out: int, out_glue, out_shape, out_dtype) -> Plan:
    pools = [i for i, n in enumerate(nodes) if n.op == "pool"]
    if len(pools) > 1:
        raise Unrecognized(f"{len(pools)} poolings in one forward")
    index = pools[0]
    pool = nodes[index]
    other = sorted({n.op for i, n in enumerate(nodes) if i != index} - {"ew"})
    if other:
        raise Unrecognized(f"a pooling together with a {other[0]} (one kernel pools, then works elementwise)")
    source = pool.args[0]
    if source[0] != "leaf":
        raise Unrecognized("pooling of a computed value (elementwise work before the pooling)")
    if leaves[source[1]].dtype not in FLOAT_DTYPES:
        raise Unrecognized(f"pooling of a {leaves[source[1]].dtype} tensor")
    if out != index and (out not in downstream(nodes, index) or nodes[out].shape != pool.shape):
        raise Unrecognized("an output that is not the pooled tensor (or an elementwise function of it)")
    if out_dtype not in FLOAT_DTYPES or out_dtype == "torch.float64":
        raise Unrecognized(f"the output is {out_dtype}")
    a = pool.attrs
    settings = f"kernel {_text(a['kernel'])}, stride {_text(a['stride'])}, padding {_text(a['padding'])}"
    if pool.name == "max" and any(d != 1 for d in a["dilation"]):
        settings += f", dilation {_text(a['dilation'])}"
    summary = (f"{a['pattern']} ({settings}) of {'x'.join(map(str, leaves[source[1]].shape))}"
               + epilogue_names(nodes, downstream(nodes, index)))
    return Plan(kind="pool", leaves=leaves, nodes=nodes, out=out, out_glue=out_glue, out_shape=out_shape,
                out_dtype=out_dtype, full_shape=leaves[source[1]].shape, red_dims=(), summary=summary)


def _text(values: tuple[int, ...]) -> str:
    return str(values[0]) if len(set(values)) == 1 else "x".join(map(str, values))


def _pool(plan: Plan) -> tuple[int, Node]:
    index = next(i for i, n in enumerate(plan.nodes) if n.op == "pool")
    return index, plan.nodes[index]


def render(plan: Plan, problem: Problem, config: dict[str, Any], ctx: Context) -> str:
    index, pool = _pool(plan)
    a = pool.attrs
    n = a["dims"]
    leaf = pool.args[0][1]
    out = plan.nodes[plan.out]
    groups = [Group(math.prod(out.shape[:-n]), "plane", None, "")]
    axes = ("od", "oh", "ow")[3 - n:]
    for size, name in zip(out.shape[-n:], axes):
        if name == "od":
            groups.append(Group(size, "od", None, ""))
        else:
            groups.append(Group(size, name, f"{name[1]}mask", "[:, None]" if name == "oh" else "[None, :]"))
    em = Emitter(plan, {"full": groups}, values={index: "pooled"})
    value, present = em.gen(("node", plan.out), "full", tuple(out.shape))
    value = store_value(value, present, len(groups), "[BLOCK_H, BLOCK_W]")
    names = {k: local_name(f"pool_{k}", problem) for k in ("in_sizes", "out_sizes", "kernel", "stride", "padding",
                                                             "dilation", "planes")}
    module = a["module"]
    if module is not None:
        settings = {"kernel": f"{module}.kernel_size", "stride": f"{module}.stride", "padding": f"{module}.padding",
                    "dilation": f"{module}.dilation" if pool.name == "max" else "1",
                    "ceil_mode": f"bool({module}.ceil_mode)",
                    "count_include_pad": f"bool({module}.count_include_pad)" if pool.name == "avg" else "True",
                    "divisor": f"{module}.divisor_override" if pool.name == "avg" and n > 1 else "None"}
    else:
        settings = {"kernel": repr(a["kernel"]), "stride": repr(a["stride"]), "padding": repr(a["padding"]),
                    "dilation": repr(a["dilation"]), "ceil_mode": repr(a["ceil_mode"]),
                    "count_include_pad": repr(a["count_include_pad"]), "divisor": repr(a["divisor_override"])}
    variables = common_variables(plan, problem, config, ctx)
    if not em.loads:  # only the pooled input is read: its plane offset is int64, the rest within a plane
        variables["offset_limit"] = None
    variables["out_alloc"] = f"(*in{leaf}.shape[:-{n}], *{names['out_sizes']}[{3 - n}:])"
    return render_template("pool.py.j2", body=em.outer, result=value, kind=pool.name, n=n, leaf=leaf, names=names,
                  module=module, settings=settings, **variables)


# --- the search space ----------------------------------------------------------------------------


def space(plan: Plan) -> list[dict[str, Any]]:
    _, pool = _pool(plan)
    n = pool.attrs["dims"]
    out = pool.shape
    ow = out[-1]
    oh = out[-2] if n >= 2 else 1
    programs_per_tile = math.prod(out[:-2]) if n >= 2 else math.prod(out[:-1])
    if n == 1:
        tiles = [(1, bw) for bw in (1024, 512, 2048, 256, 4096)]
    else:
        # the widest BLOCK_W that wastes the least of each output row, then rows to make 1024 lanes
        best_w = min((64, 128, 32, 16), key=lambda bw: (math.ceil(ow / bw) * bw - ow) / bw + (bw < 32) * 0.5)
        tiles = [(max(1, min(pow2(oh), 1024 // best_w)), best_w)]
        tiles += [(bh, bw) for bh, bw in ((8, 128), (16, 64), (32, 32), (4, 128), (8, 64), (16, 32), (2, 256),
                                          (4, 64), (8, 32))]
    configs = []
    for bh, bw in tiles:
        bw = min(bw, max(16, pow2(ow)))
        bh = min(bh, pow2(oh))
        lanes = bh * bw
        configs.append({"BLOCK_H": bh, "BLOCK_W": bw, "num_warps": 8 if lanes >= 2048 else 4 if lanes >= 256 else 2})
    # keep enough programs for the GPU on small outputs: shrink the default tile
    first = dict(configs[0])
    while first["BLOCK_H"] * first["BLOCK_W"] > 128 and \
            programs_per_tile * math.ceil(oh / first["BLOCK_H"]) * math.ceil(ow / first["BLOCK_W"]) < 2 * SMS:
        key = "BLOCK_H" if first["BLOCK_H"] > 1 else "BLOCK_W"
        first[key] //= 2
    seen, ordered = set(), []
    for c in [first] + configs:
        k = tuple(sorted(c.items()))
        if k not in seen:
            seen.add(k)
            ordered.append(c)
    return ordered


FAMILY = register(Family(kind="pool", render=render, space=space, claims=('pool',), classify=classify, rank=1))
