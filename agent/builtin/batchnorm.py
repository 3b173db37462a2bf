"""The `batchnorm` family: batch norm in training mode (an nn.BatchNorm1d/2d/3d left in its default
mode), with the elementwise work before and after it, and at most one library op first (a Linear's
product or a convolution, left to torch): kernels/batchnorm.py.j2.

agent.builtin.norms lowers the batch norm to two `bnstats` nodes (the per-channel mean and biased
variance of its input x over every dim but the channel's, dim 1) and elementwise nodes for the
normalization; this family claims them. The draft:

- runs the library op in torch (torch.mm of the product's operands; F.conv*d with the module's
  settings, the bias left to the kernels), or none when x is computed from the inputs alone;
- sees x as [N, C, S] (S the spatial sizes' product, 1 after a Linear), every size read at run time
  from the tensors, and each operand expanded to that shape and passed with its strides;
- `bn_partial_kernel`: each program computes x for BLOCK_C channels over a chunk of the reduction
  (elementwise work before the norm included) and merges its moments (count, mean, M2) tile by
  tile with Chan's formula (accurate for data far from zero, as a two-pass variance is);
- `bn_finalize_kernel`: the chunks' moments merged in a fixed order into the mean and variance;
- `bn_apply_kernel`: x again, normalized, with the epilogue, written once.

Running statistics: a module that tracks them is updated as nn.BatchNorm's forward updates it
(num_batches_tracked += 1 in torch; running_mean and running_var by the finalize kernel, with the
unbiased variance and the module's momentum read at run time, or the cumulative average when the
momentum is None), so the draft is a drop-in module; the evaluator compares forward outputs only,
and the output never reads them in training mode. A module put in eval() normalizes with its
running statistics instead (no statistics kernels), as nn.BatchNorm does.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from agent.builtin.configs import SMS, pow2, unique
from agent.builtin.expressions import expression, literal
from agent.builtin.ir import FLOAT_DTYPES, Leaf, Node, Plan, Problem, Unrecognized
from agent.builtin.registry import Family, register
from agent.builtin.templates import Context, common_variables, render as render_template
from agent.builtin.window import downstream, upstream

STATS = "bnstats"
LIBRARY = ("mm", "conv")  # ops left to torch before the batch norm
APPLY = [(1024, 4), (2048, 8), (512, 4), (4096, 8)]  # (BLOCK, num_warps) of the elementwise pass


@dataclass
class Parts:
    x: tuple[str, int]  # the batch norm's input
    mean: int  # the bnstats nodes
    var: int
    lib: int | None  # the library op's node (its args are leaves), or None
    full: tuple[int, ...]  # x's shape: [N, C, *spatial]
    running: tuple[str, str] | None  # the running statistics' parameter names


def parts(leaves: list[Leaf], nodes: list[Node]) -> Parts:
    """The pieces of a batchnorm plan, or why the nodes are not one."""
    stats = [i for i, n in enumerate(nodes) if n.op == STATS]
    xs = {nodes[i].args[0] for i in stats}
    if len(xs) != 1 or sorted(nodes[i].name for i in stats) != ["mean", "var"]:
        raise Unrecognized("more than one batch norm in training mode in one forward")
    x = xs.pop()
    mean = next(i for i in stats if nodes[i].name == "mean")
    var = next(i for i in stats if nodes[i].name == "var")
    full = leaves[x[1]].shape if x[0] == "leaf" else nodes[x[1]].shape
    pre = (upstream(nodes, x[1]) | {x[1]}) if x[0] == "node" else set()
    libs = sorted(i for i in pre if nodes[i].op in LIBRARY)
    if len(libs) > 1:
        raise Unrecognized(f"{len(libs)} matrix products or convolutions before a batch norm in training mode")
    lib = libs[0] if libs else None
    if lib is not None:
        node = nodes[lib]
        if any(not (isinstance(a, tuple) and a[0] == "leaf") for a in node.args):
            raise Unrecognized("a product or convolution of computed operands before a batch norm")
        if node.op == "mm" and (node.name != "mm" or len(node.shape) != 2):
            raise Unrecognized("a batched matrix product before a batch norm")
        if node.shape != full:
            raise Unrecognized(f"a batch norm over a view of a {'x'.join(map(str, node.shape))} product")
    for i, node in enumerate(nodes):
        if i == lib or node.op == STATS:
            continue
        if node.op != "ew":
            what = node.attrs.get("pattern") or node.op
            where = "before" if i in pre else "after"
            raise Unrecognized(f"a {what} {where} a batch norm in training mode "
                               "(its kernels fuse elementwise work only)")
        if len(node.shape) != len(full) or any(s not in (1, f) for s, f in zip(node.shape, full)) \
                or (node.name in ("view", "expand") and node.shape != full):
            raise Unrecognized(f"a {node.name} to {list(node.shape)} around a batch norm over {list(full)}")
    for i, node in enumerate(nodes):
        for a in node.args:
            if isinstance(a, tuple) and a[0] == "leaf" and i != lib:
                shape = leaves[a[1]].shape
                if len(shape) > len(full) or any(s not in (1, f) for s, f in zip(shape[::-1], full[::-1])):
                    raise Unrecognized(f"an operand of shape {list(shape)} beside a batch norm over {list(full)}")
    running = nodes[mean].attrs.get("running")
    return Parts(x, mean, var, lib, tuple(full), tuple(running) if running else None)


def classify(leaves: list[Leaf], nodes: list[Node], out: int, out_glue, out_shape, out_dtype) -> Plan:
    p = parts(leaves, nodes)
    if out not in downstream(nodes, p.mean) or nodes[out].shape != p.full:
        raise Unrecognized("an output that is not the batch-normalized tensor (or an elementwise function of it)")
    if out_dtype not in FLOAT_DTYPES or out_dtype == "torch.float64":
        raise Unrecognized(f"the output is {out_dtype}")
    shape = "x".join(map(str, p.full))
    first = ""
    if p.lib is not None:
        first = f"{nodes[p.lib].attrs.get('pattern') or nodes[p.lib].op} in torch, then "
    epi = sorted({n.name for i, n in enumerate(nodes) if i != p.lib and n.op == "ew" and n.name != "view"})
    summary = (f"{first}batch norm in training mode on {shape} (statistics over every dim but 1)"
               f" + elementwise ({', '.join(epi)})")
    dims = (0,) + tuple(range(2, len(p.full)))
    return Plan(kind="batchnorm", leaves=leaves, nodes=nodes, out=out, out_glue=out_glue, out_shape=out_shape,
                out_dtype=out_dtype, full_shape=p.full, red_dims=dims, summary=summary)


# --- drafting --------------------------------------------------------------------------------------


def _emit(plan: Plan, target: int, known: dict[int, str]) -> tuple[list[str], str]:
    """Statements computing node `target` for the tile indexed by (n, c, s) under `mask`: its
    operands loaded through their [N, C, S] strides, `known` nodes read by name."""
    nodes = plan.nodes
    needed = sorted(((upstream(nodes, target) | {target}) - set(known)))
    lines: list[str] = []
    names = dict(known)
    loaded: set[int] = set()
    for i in needed:
        if i in known:
            continue
        node = nodes[i]
        if node.op != "ew":
            raise Unrecognized(f"a {node.op} inside the batch norm's elementwise work")
        operands = []
        for a in node.args:
            if isinstance(a, tuple) and a[0] == "leaf":
                k = a[1]
                if k not in loaded:
                    loaded.add(k)
                    lines.append(f"l{k} = tl.load(in{k}_ptr + n * in{k}_sn + c * in{k}_sc + s * in{k}_ss, mask=mask, "
                                 f"other=0.0).to(tl.float32)")
                operands.append(f"l{k}")
            elif isinstance(a, tuple):
                if a[1] not in names:
                    raise Unrecognized("a value of the batch norm's epilogue computed out of order")
                operands.append(names[a[1]])
            else:
                operands.append(literal(a))
        expr, pre = expression(node, operands)
        lines += pre
        lines.append(f"v{i} = {expr}")
        names[i] = f"v{i}"
    return lines, names[target]


def _module(problem: Problem, running: tuple[str, str] | None) -> str | None:
    """The nn.BatchNorm module (`self.bn`) whose running statistics the draft updates."""
    if running is None:
        return None
    prefix = running[0].rsplit(".", 1)[0] if "." in running[0] else ""
    expr = problem.param_exprs[running[0]][: -len(".running_mean")] if running[0].endswith(".running_mean") else ""
    cls = problem.submodules.get(expr, ("", {}))[0]
    if not expr or not cls.startswith("BatchNorm") or f"{prefix}.num_batches_tracked" not in problem.param_exprs:
        raise Unrecognized("running statistics of a batch norm in training mode that are no nn.BatchNorm module's")
    return expr


def _library(plan: Plan, lib: int) -> str:
    """forward's torch call of the library op (its bias, an elementwise add, is the kernels')."""
    node = plan.nodes[lib]
    a, b = (f"in{r[1]}" for r in node.args)
    if node.op == "mm":
        return f"lib = torch.mm({a}, {b})"
    at = node.attrs
    d = at["dims"]
    module = at.get("module")

    def setting(name: str) -> str:
        return f"{module}.{name}" if module else repr(tuple(at[name]))

    if at["transposed"]:
        return (f"lib = torch.nn.functional.conv_transpose{d}d({a}, {b}, None, {setting('stride')}, "
                f"{setting('padding')}, {setting('output_padding')}, {module + '.groups' if module else at['groups']}, "
                f"{setting('dilation')})")
    return (f"lib = torch.nn.functional.conv{d}d({a}, {b}, None, {setting('stride')}, {setting('padding')}, "
            f"{setting('dilation')}, {module + '.groups' if module else at['groups']})")


def render(plan: Plan, problem: Problem, config: dict[str, Any], ctx: Context) -> str:
    p = parts(plan.leaves, plan.nodes)
    module = _module(problem, p.running)
    known = {p.lib: "lib"} if p.lib is not None else {}
    lib_load = ["lib = tl.load(lib_ptr + n * lib_sn + c * lib_sc + s * lib_ss, mask=mask, other=0.0).to(tl.float32)"]
    if p.x[0] == "leaf":
        k = p.x[1]
        pre, x = [f"l{k} = tl.load(in{k}_ptr + n * in{k}_sn + c * in{k}_sc + s * in{k}_ss, mask=mask, "
                  f"other=0.0).to(tl.float32)"], f"l{k}"
    elif p.x[1] == p.lib:
        pre, x = [], "lib"
    else:
        pre, x = _emit(plan, p.x[1], known)
    stats = ["v{} = tl.load(stats_ptr + c, mask=mask, other=0.0)".format(p.mean),
             "v{} = tl.load(stats_ptr + C + c, mask=mask, other=1.0)".format(p.var)]
    post, result = _emit(plan, plan.out, {**known, p.mean: f"v{p.mean}", p.var: f"v{p.var}"})
    if p.lib is not None:
        pre, post = lib_load + pre, lib_load + post
    post = stats + post
    operands = sorted({a[1] for i, n in enumerate(plan.nodes) if i != p.lib for a in n.args
                       if isinstance(a, tuple) and a[0] == "leaf"})
    variables = common_variables(plan, problem, config, ctx)
    setup, launch = _forward(plan, p, operands, module, variables["scalars"], config)
    variables.update(out_alloc="full", offset_limit=None)
    return render_template("batchnorm.py.j2", pre=pre, x=x, post=post, result=result, operands=operands,
                           lib=p.lib is not None, setup=setup, launch=launch, **variables)


def _forward(plan: Plan, p: Parts, operands: list[int], module: str | None, scalars: list[Any],
             config: dict[str, Any]) -> tuple[list[str], list[str]]:
    """forward's lines before the output's allocation (the library op, the run-time sizes, the
    operands as [N, C, S] views) and after it (the launches)."""
    setup = [_library(plan, p.lib)] if p.lib is not None else []
    shapes = (["lib.shape"] if p.lib is not None else []) + [f"in{k}.shape" for k in operands]
    setup += [f"full = torch.broadcast_shapes({', '.join(shapes)})" if len(shapes) > 1 else f"full = {shapes[0]}",
              "N, C, S = full[0], full[1], math.prod(full[2:])"]
    args = []
    for k in operands:
        setup.append(f"in{k} = in{k}.expand(full).reshape(N, C, S)")
        args.append(f"in{k}, in{k}.stride(0), in{k}.stride(1), in{k}.stride(2), ")
    if p.lib is not None:
        setup.append("lib = lib.reshape(N, C, S)")
        args.append("lib, lib.stride(0), lib.stride(1), lib.stride(2), ")
    args += [f"{s.expr}, " for s in scalars]
    common = "".join(args)
    device = "lib.device" if p.lib is not None else f"in{operands[0]}.device"
    big = ", ".join((["lib"] if p.lib is not None else []) + [f"in{k}" for k in operands])
    launch = [f"i64 = max(t.numel() for t in ({big}, out)) > 2**31 - 1 - 65536",
              f"stats = torch.empty((2, C), device={device}, dtype=torch.float32)"]
    statistics = ["if N * S < 2:",
                  '    raise ValueError(f"Expected more than 1 value per channel when training, got input size '
                  '{tuple(full)}")']
    if config["layout"] == "rows":
        reduced, block_r = "N * S", config["BLOCK_R"]
    else:
        reduced, block_r = "N", 1
    statistics += [f"n_split = max(1, min(triton.cdiv({reduced}, {block_r}), "
                   f"triton.cdiv({config['programs']}, triton.cdiv(C, {config['BLOCK_C']}))))",
                   f"chunk = triton.cdiv(triton.cdiv({reduced}, n_split), {block_r}) * {block_r}",
                   f"n_split = triton.cdiv({reduced}, chunk)",
                   f"ws = torch.empty((3, n_split, C), device={device}, dtype=torch.float32)",
                   f"bn_partial_kernel[(triton.cdiv(C, {config['BLOCK_C']}), n_split)]({common}ws, N, C, S, chunk, "
                   f"n_split, BLOCK_R={config['BLOCK_R']}, BLOCK_C={config['BLOCK_C']}, I64=i64, "
                   f"num_warps={config['num_warps']})"]
    if module is None:
        statistics.append("bn_finalize_kernel[(triton.cdiv(C, 256),)](ws, stats, stats, stats, 0.0, C, n_split, "
                          "BLOCK=256, UPDATE=False)")
        launch += statistics
    else:
        statistics += [f"{module}.num_batches_tracked.add_(1)",
                       f"momentum = {module}.momentum",
                       f"factor = 1.0 / float({module}.num_batches_tracked) if momentum is None else float(momentum)",
                       f"bn_finalize_kernel[(triton.cdiv(C, 256),)](ws, stats, {module}.running_mean, "
                       f"{module}.running_var, factor, C, n_split, BLOCK=256, UPDATE=True)"]
        launch.append(f"if {module}.training:  # batch statistics, and the running ones updated")
        launch += [f"    {line}" for line in statistics]
        launch += ["else:  # eval(): the running statistics, as nn.BatchNorm",
                   f"    stats[0].copy_({module}.running_mean)",
                   f"    stats[1].copy_({module}.running_var)"]
    launch += [f"bn_apply_kernel[(triton.cdiv(out.numel(), {config['BLOCK']}),)]({common}stats, out, C, S, "
               f"out.numel(), BLOCK={config['BLOCK']}, I64=i64, num_warps={config['apply_warps']})"]
    return setup, launch


# --- the search space ------------------------------------------------------------------------------


def space(plan: Plan) -> list[dict[str, Any]]:
    """The statistics pass's tiles (layout `rows` when S is 1 at the traced sizes: channels
    contiguous; else `spatial`: one sample's S contiguous) and programs, then the elementwise pass's
    block; the first from the traced shape. Every configuration is correct at any size."""
    full = plan.full_shape
    c, s = full[1], math.prod(full[2:])
    apply = [{"BLOCK": b, "apply_warps": w} for b, w in APPLY]
    if s == 1:
        bc = min(64, max(16, pow2(c)))
        tiles = [{"layout": "rows", "BLOCK_R": r, "BLOCK_C": ch, "num_warps": w}
                 for r, ch, w in ((32, bc, 4), (64, bc, 8), (16, min(128, max(16, pow2(c))), 4), (128, 32, 8))]
    else:
        br = min(1024, max(32, pow2(s)))
        tiles = [{"layout": "spatial", "BLOCK_R": r, "BLOCK_C": ch, "num_warps": w}
                 for r, ch, w in ((br, 2, 4), (min(br, 512), 4, 4), (br, 1, 4), (min(2 * br, 2048), 2, 8))]
    programs = [4 * SMS, 8 * SMS, 2 * SMS]
    first = {**tiles[0], "programs": programs[0], **apply[0]}
    out = [first]
    out += [{**t, "programs": programs[0], **apply[0]} for t in tiles[1:]]
    out += [{**tiles[0], "programs": g, **apply[0]} for g in programs[1:]]
    out += [{**tiles[0], "programs": programs[0], **a} for a in apply[1:]]
    return unique(out)


FAMILY = register(Family(kind="batchnorm", render=render, space=space, claims=(STATS,), classify=classify, rank=-1))
