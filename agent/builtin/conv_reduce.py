"""The `conv_reduce` plan: a convolution (with its elementwise epilogue), then reductions over its
output and what follows them (GroupNorm, InstanceNorm, softmax or logsumexp over channels, a
global mean over the spatial dims, max/min over channels...). See docs/builtin-conv.md,
"Reductions after a convolution".

A plan made of two existing plans, each rendered by its own template:

1. the *conv stage*: the convolution and the elementwise nodes after it that keep its shape and
   read nothing but it and leaves (bias, scaling, activations: the ops between the convolution and
   the first reduction), up to the latest node that is all the rest reads of them (`_frontier`),
   drafted by agent.builtin.conv (kernels/conv.py.j2, unchanged); it writes
   its value - the *intermediate* - into a float32 buffer allocated in forward from the run-time
   shape;
2. the *reduction stage*: every other node, with the intermediate as a leaf input (read through a
   reshape where the forward views it: GroupNorm's [N, G, C/G, H*W]), classified as any forward
   over inputs is (agent.builtin.classify: rowwise, colwise, twolevel) and rendered by that
   kind's template, so the reductions accumulate in float32 as they do there. Elementwise work
   after a GroupNorm's view back to [N, C, H, W] is computed on the grouped view (`_regroup`).

The candidate module is the reduction stage's rendering with the conv stage's kernel beside its
kernels and the conv stage's forward (run first) before its own; forward hands the conv stage's
`out` to the reduction stage as `conv_out`. The reduction stage's numbers that follow the sizes
(row widths, a mean's scale) are fitted over the intermediate's dims, not the inputs' (a conv's
output size is no monomial of its input's): `_free_reduction`, with agent.builtin.general's fit.

Configurations: the conv stage's keys prefixed `conv_`, the reduction stage's as they are; the
space is a concatenation, not the product: each conv tile (and precision) with the reduction
stage's default, then each other reduction configuration with the conv stage's default.
"""
from __future__ import annotations

import copy
import dataclasses
import itertools
import math
import re
from collections.abc import Callable
from typing import Any

from agent.builtin import conv
from agent.builtin.builder import Builder
from agent.builtin.general import fit_sizes
from agent.builtin.ir import Leaf, Node, Plan, Problem, Unrecognized
from agent.builtin.classify import classify as classify_nodes
from agent.builtin.configs import unique
from agent.builtin.registry import Family, register, render_plan
from agent.builtin.registry import space as plan_space
from agent.builtin.templates import Context
from agent.builtin.variants import SizeClass
from agent.builtin.window import downstream, upstream

PREFIX = "conv_"  # the conv stage's configuration keys
INTERMEDIATE = "conv_out"  # the forward's name of the conv stage's output, the reduction stage's leaf
KINDS = ("rowwise", "colwise", "twolevel")  # the reduction stage's plans


@dataclasses.dataclass
class Stages:
    conv: Plan  # kind "conv": writes the intermediate (float32)
    reduce: Plan  # rowwise / colwise / twolevel over the intermediate (a leaf input) and the other leaves
    shape: tuple[int, ...]  # the intermediate's


def classify(leaves: list[Leaf], nodes: list[Node], out: int, out_glue, out_shape, out_dtype) -> Plan:
    """The plan for a convolution whose output reductions read (agent.builtin.conv hands it over)."""
    plan = Plan(kind="conv_reduce", leaves=leaves, nodes=nodes, out=out, out_glue=out_glue, out_shape=out_shape,
                out_dtype=out_dtype)
    stages = split(plan, n_inputs=0)
    plan.full_shape, plan.red_dims = stages.reduce.full_shape, stages.reduce.red_dims
    plan.summary = f"{stages.conv.summary}, then {stages.reduce.kind}: {stages.reduce.summary}"
    return plan


def split(plan: Plan, n_inputs: int) -> Stages:
    """The two stages of a conv_reduce plan; the intermediate is the reduction stage's input number
    `n_inputs` (the problem's inputs come first)."""
    nodes = copy.deepcopy(plan.nodes)  # agent.builtin.classify renumbers the args of the nodes it keeps
    index = next(i for i, n in enumerate(nodes) if n.op == "conv")
    shape = nodes[index].shape
    stage = {index}
    for i in sorted(downstream(nodes, index)):
        node = nodes[i]
        if node.op == "ew" and node.name != "view" and node.shape == shape and all(
                a[1] in stage for a in node.args if isinstance(a, tuple) and a[0] == "node"):
            stage.add(i)
    if plan.out in stage:
        raise Unrecognized("an output that is the convolution's epilogue, beside reductions")
    stage, frontier = _frontier(nodes, stage)
    first = _conv_stage(plan, nodes, sorted(stage), frontier)
    second = _reduction_stage(plan, nodes, stage, frontier, n_inputs)
    first.precision = second.precision = plan.precision  # the run's dots in both stages
    return Stages(first, second, nodes[frontier].shape)


def _frontier(nodes: list[Node], stage: set[int]) -> tuple[set[int], int]:
    """The conv stage cut where one value leaves it (the latest such node, so the conv kernel's
    epilogue does the most): what the rest reads of the stage is that node only. Nodes of the
    stage after it (relu(y) where y is read too) move to the reduction stage."""
    for f in sorted(stage, reverse=True):
        mine = {f} | (upstream(nodes, f) & stage)
        read = {a[1] for i, n in enumerate(nodes) if i not in mine for a in n.args
                if isinstance(a, tuple) and a[0] == "node" and a[1] in mine}
        if read == {f}:
            return mine, f
    raise Unrecognized("a convolution whose output is read at more than one point of its epilogue")


def _conv_stage(plan: Plan, nodes: list[Node], keep: list[int], frontier: int) -> Plan:
    used = sorted({a[1] for i in keep for a in nodes[i].args if isinstance(a, tuple) and a[0] == "leaf"})
    lmap = {old: new for new, old in enumerate(used)}
    nmap = {old: new for new, old in enumerate(keep)}
    mine = []
    for i in keep:
        if any(isinstance(a, tuple) and a[0] == "node" and a[1] not in nmap for a in nodes[i].args):
            raise Unrecognized("a convolution of a computed value (work before it) with reductions after it")
        node = copy.copy(nodes[i])
        node.args = [(a[0], (lmap if a[0] == "leaf" else nmap)[a[1]]) if isinstance(a, tuple) else a
                     for a in node.args]
        mine.append(node)
    shape = nodes[frontier].shape
    return conv.classify([plan.leaves[i] for i in used], mine, nmap[frontier], [], shape, "torch.float32")


def _reduction_stage(plan: Plan, nodes: list[Node], stage: set[int], frontier: int, n_inputs: int) -> Plan:
    shape = nodes[frontier].shape
    b = Builder(problem=None)  # type: ignore[arg-type]  # classify reads only the leaves and nodes
    b.leaves = list(plan.leaves)
    whole = b.leaf(Leaf(kind="input", ref=n_inputs, glue=[], shape=shape, strides=_contiguous(shape),
                        dtype="torch.float32"))
    refs: dict[int, tuple[str, int]] = {frontier: whole}
    for i, node in enumerate(nodes):
        if i in stage:
            continue
        if node.op == "ew" and node.name == "view" and node.args[0] == ("node", frontier):
            refs[i] = b.leaf(Leaf(kind="input", ref=n_inputs, glue=[("reshape", [list(node.shape)])], shape=node.shape,
                                  strides=_contiguous(node.shape), dtype="torch.float32"))
            continue
        node.args = [refs.get(a[1], a) if isinstance(a, tuple) and a[0] == "node" else a for a in node.args]
    b.nodes = nodes  # the conv stage's nodes and the folded views are no longer read: classify drops them
    if plan.out in refs:
        raise Unrecognized("a reshape of the convolution's output as the output")
    glue = _regroup(b, plan.out)
    reduced = classify_nodes(b, plan.out, glue + list(plan.out_glue), plan.out_shape, plan.out_dtype)
    if reduced.kind not in KINDS:
        raise Unrecognized(f"a {reduced.kind} after the convolution's reductions")
    return reduced


def _regroup(b: Builder, out: int) -> list[tuple[str, list[Any]]]:
    """The elementwise work after a norm over groups of channels (GroupNorm's [N, G, C/G, H*W],
    viewed back to [N, C, H, W]) computed on the grouped shape instead, so the row kernel computes
    it in its tile: a per-channel operand (a scale [C, 1, 1]) read as [G, C/G, 1], as the norm's
    own weight is, a full one (the convolution's output, for a residual) as [N, G, C/G, H*W]. The
    output is then viewed back in forward: the glue returned, to go before the output's own."""
    for i, view in enumerate(b.nodes):
        if not (view.op == "ew" and view.name == "view" and isinstance(view.args[0], tuple)
                and view.args[0][0] == "node"):
            continue
        grouped, full = b.nodes[view.args[0][1]].shape, view.shape
        after = downstream(b.nodes, i)
        if out not in after or not _groups_channels(full, grouped) or any(
                b.nodes[j].op != "ew" or b.nodes[j].name == "view" or b.nodes[j].shape != full for j in after):
            continue
        changed: dict[int, list[Any]] = {}
        for j in sorted(after):
            args = []
            for a in b.nodes[j].args:
                if a == ("node", i):
                    args.append(view.args[0])
                elif isinstance(a, tuple) and a[0] == "node":
                    args.append(a if a[1] in after else None)
                else:
                    args.append(_grouped_operand(b, a, full, grouped))
            if any(a is None for a in args):
                break
            changed[j] = args
        else:
            for j, args in changed.items():
                b.nodes[j] = Node("ew", b.nodes[j].name, args, grouped, b.nodes[j].dtype, dict(b.nodes[j].attrs))
            return [("view", [list(full)])]
    return []


def _groups_channels(full: tuple[int, ...], grouped: tuple[int, ...]) -> bool:
    """Whether `grouped` is `full` = [N, C, *spatial] viewed as [N, G, C/G, prod(spatial)]."""
    return (len(full) >= 3 and len(grouped) == 4 and grouped[0] == full[0] and grouped[1] * grouped[2] == full[1]
            and grouped[3] == math.prod(full[2:]))


def _grouped_operand(b: Builder, arg: Any, full: tuple[int, ...], grouped: tuple[int, ...]) -> Any:
    """An operand of an op on `full` as the same op on `grouped` reads it: a scalar as it is; a
    leaf constant over every dim but the channels as [G, C/G, 1]; a contiguous leaf of the full
    shape reshaped to the grouped one; None for anything else."""
    if not isinstance(arg, tuple):
        return arg
    if arg[0] != "leaf":
        return None
    leaf = b.leaves[arg[1]]
    shape = (1,) * (len(full) - len(leaf.shape)) + tuple(leaf.shape)
    if tuple(leaf.shape) == full and tuple(leaf.strides) == _contiguous(full):
        target = grouped
    elif len(shape) == len(full) and all(s == 1 for d, s in enumerate(shape) if d != 1):
        target = (grouped[1], grouped[2], 1) if shape[1] != 1 else (1,)
    else:
        return None
    return b.leaf(dataclasses.replace(leaf, glue=leaf.glue + [("reshape", [list(target)])], shape=target,
                                      strides=_contiguous(target)))


def _contiguous(shape: tuple[int, ...]) -> tuple[int, ...]:
    return tuple(math.prod(shape[i + 1:]) for i in range(len(shape)))


# --- drafting ------------------------------------------------------------------------------------


def configs(config: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """The conv stage's configuration and the reduction stage's."""
    first = {k[len(PREFIX):]: v for k, v in config.items() if k.startswith(PREFIX)}
    return first, {k: v for k, v in config.items() if not k.startswith(PREFIX)}


def render(plan: Plan, problem: Problem, config: dict[str, Any], ctx: Context) -> str:
    n_inputs = len(problem.input_names)
    stages = split(plan, n_inputs)
    conv_config, reduce_config = configs(config)
    reduce_problem = dataclasses.replace(problem, input_names=[*problem.input_names, INTERMEDIATE])

    def render_reduction(stage: Plan, sizes: list[tuple[str, str]], strict: bool) -> str:
        own = dataclasses.replace(ctx, sizes=[*ctx.sizes, *sizes], strict=strict and ctx.strict)
        return render_plan(dataclasses.replace(stage, summary=plan.summary), reduce_problem, reduce_config, own)

    second, tied = _free_reduction(stages, _others(plan, problem, stages), render_reduction)
    first = conv.render(stages.conv, problem, conv_config, ctx)
    return _stitch(first, second, stages, len(ctx.guards), config, tied)


def _others(plan: Plan, problem: Problem, stages: Stages) -> list[tuple[SizeClass, Stages]]:
    """The problem traced with some size classes changed (agent.builtin.variants) where the
    intermediate's shape differs from this plan's in one dim or in dims of one value (H and W):
    each as a size class of the intermediate's first such dim (`conv_out.shape[2]`)."""
    variants = problem.variants
    if variants is None:
        return []
    classes = [c for c in variants.classes if c.plan is not None]
    shape = stages.shape
    found: dict[frozenset[int], tuple[SizeClass, Stages]] = {}
    for k in range(min(len(classes), 3) + 1):
        for group in itertools.combinations(classes, k):
            traced = variants.joint(group)
            if traced is None or traced[0].kind != "conv_reduce":
                continue
            try:
                other = split(traced[0], len(problem.input_names))
            except Unrecognized:
                continue
            dims = frozenset(d for d, (a, b) in enumerate(zip(shape, other.shape)) if a != b)
            if (not dims or dims in found or len(other.shape) != len(shape)
                    or len({shape[d] for d in dims}) > 1 or len({other.shape[d] for d in dims}) > 1):
                continue
            d = min(dims)
            found[dims] = (SizeClass(value=shape[d], varied=other.shape[d], inputs=[], init=[],
                                     name=f"{INTERMEDIATE}.shape[{d}]", source=f"{INTERMEDIATE}.shape[{d}]"), other)
    return [found[k] for k in sorted(found, key=lambda k: sorted(k))]  # the same order whichever plan is drafted


Renderer = Callable[[Plan, list[tuple[str, str]], bool], str]


def _free_reduction(stages: Stages, others: list[tuple[SizeClass, Stages]],
                    render_reduction: Renderer) -> tuple[str, list[tuple[int, ...]]]:
    """The reduction stage's rendering with every number that follows the intermediate's shape
    written from it (agent.builtin.general's fit, over the intermediate's dims rather than the
    inputs': the convolution's output sizes are no monomials of its input sizes); and the groups
    of the intermediate's dims that it reads as one (forward checks that they are equal)."""
    plans = {c.name: o.reduce for c, o in others}
    dims = {c.name: tuple(d for d, (a, b) in enumerate(zip(stages.shape, o.shape)) if a != b) for c, o in others}

    def one(c: SizeClass | None, free: list[SizeClass], sizes: list[tuple[str, str]]) -> str:
        return render_reduction(stages.reduce if c is None else plans[c.name], sizes, c is None)

    source, fitted, free = fit_sizes([c for c, _ in others], one, prefix=PREFIX)
    used = {name for f in fitted.values() for name in f[1]}
    return source, [dims[c.name] for c in free if c.name in used and len(dims[c.name]) > 1]


def _stitch(first: str, second: str, stages: Stages, n_guards: int, config: dict[str, Any],
            tied: list[tuple[int, ...]]) -> str:
    """The reduction stage's module with the conv stage's kernels before its class and the conv
    stage's forward (after the guards both share) before its own."""
    n_conv = len(stages.conv.leaves)
    second = _renumber(second, n_conv)  # the reduction stage's leaves follow the conv stage's
    kernels = first[first.index("def _conv_pair("):first.index("\nclass ModelNew")].rstrip("\n")
    head, tail = second.split("\nclass ModelNew", 1)
    own_forward, own_body = _forward(second)
    conv_body = _forward(first)[1]
    if conv_body[:n_guards] != own_body[:n_guards] or conv_body[-1].strip() != "return out":
        raise Unrecognized("the two stages' drafts do not share forward's checks")
    handover = ["        # the reduction stage reads the convolution's float32 output, its sizes from its shape",
                f"        {INTERMEDIATE} = out"]
    for group in tied:  # sizes equal in every trace (H and W): the kernel reads one of them
        pairs = " or ".join(f"{INTERMEDIATE}.shape[{d}] != {INTERMEDIATE}.shape[{group[0]}]" for d in group[1:])
        handover += [f"        if {pairs}:",
                     f'            raise ValueError(f"the convolution\'s output {{tuple({INTERMEDIATE}.shape)}} '
                     f'has dims {list(group)} unequal; this drafted kernel takes them equal")']
    body = conv_body[:-1] + handover + own_body[n_guards:]
    tail = "\nclass ModelNew" + tail
    start = tail.index(own_forward) + len(own_forward)
    tail = tail[:start] + "\n".join(body) + "\n"
    head = head.rstrip("\n") + "\n\n\n" + kernels + "\n\n"
    reduce_template = "kernels/" + {"twolevel": "twolevel.py.j2", "colwise": "colwise.py.j2"}.get(
        stages.reduce.kind, "split.py.j2" if config.get("split") else "rowwise.py.j2")
    head = head.replace(f"(template {reduce_template});", f"(templates kernels/conv.py.j2, then {reduce_template});", 1)
    return head + tail


def _forward(source: str) -> tuple[str, list[str]]:
    """forward's `def` line and its body's lines (forward is the module's last method)."""
    lines = source.rstrip("\n").split("\n")
    at = next(i for i, line in enumerate(lines) if line.startswith("    def forward(self"))
    return lines[at] + "\n", lines[at + 1:]


def _renumber(source: str, offset: int) -> str:
    """Leaf i of the reduction stage as in{offset + i} (its kernel parameter in{offset + i}_ptr), in
    the kernels and in forward (not in the constructor or the prelude, copied from the reference)."""
    def shift(text: str) -> str:
        return re.sub(r"\bin(\d+)(_ptr)?\b", lambda m: f"in{int(m.group(1)) + offset}{m.group(2) or ''}", text)

    kernels, cls = source.index("@triton.jit"), source.index("\nclass ModelNew")
    forward = source.index("\n    def forward(self", cls)
    return source[:kernels] + shift(source[kernels:cls]) + source[cls:forward] + shift(source[forward:])


# --- the search space ----------------------------------------------------------------------------


def space(plan: Plan) -> list[dict[str, Any]]:
    """Each conv configuration (tiles, precision: agent.builtin.conv.space, tf32x3 then ieee under
    float32) with the reduction stage's default, then each other reduction configuration
    (agent.builtin.registry.space of the reduction stage's plan) with the conv stage's default."""
    stages = split(plan, n_inputs=0)
    first = [{f"{PREFIX}{k}": v for k, v in c.items()} for c in conv.space(stages.conv)]
    second = plan_space(stages.reduce)
    return unique([{**c, **second[0]} for c in first] + [{**first[0], **r} for r in second[1:]])


# no claims of its own: agent.builtin.conv hands it a convolution followed by reductions
FAMILY = register(Family(kind="conv_reduce", render=render, space=space, classify=classify))
