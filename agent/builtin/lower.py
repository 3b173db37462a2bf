"""From the traced aten graph to the IR: the walk over the fx graph. Inputs and parameters become
leaves on first use, with the glue ops (views, transposes, expands, casts) applied to them before
that recorded for replay in torch; flat-layout glue on a computed value is a view of the same
registers; every other op is lowered by agent.builtin.aten; the output then picks the plan
(agent.builtin.classify)."""
from __future__ import annotations

from typing import Any

from agent.builtin.aten import lower_op
from agent.builtin.builder import Builder, Unusable, returned
from agent.builtin.classify import classify
from agent.builtin.load import op_name
from agent.builtin.registry import fallback_plan, matched_plan
from agent.builtin.ir import FLOAT_DTYPES, LEAF_DTYPES, Leaf, NoTemplate, Plan, Problem, Unrecognized, no_template

# aten glue ops replayed in torch on a leaf (views and copies; see tools.guard.ops.GLUE_OPS)
LEAF_GLUE = {"view", "_unsafe_view", "reshape", "t", "transpose", "permute", "expand", "unsqueeze", "squeeze",
             "alias", "detach", "clone", "contiguous", "_to_copy", "expand_as", "view_as", "lift_fresh_copy",
             "repeat", "select", "slice"}
# glue on a computed value that keeps its flat (row-major) layout: same registers in the kernel
FLAT_GLUE = {"view", "_unsafe_view", "reshape", "unsqueeze", "squeeze", "alias", "detach", "clone", "contiguous",
             "view_as", "flatten"}


def _overload(target) -> str:
    return getattr(target, "_overloadname", "default")


class _Missing:
    """The value of an op without a template, and of everything computed from it."""


def _reads_missing(node, env: dict[Any, Any]) -> bool:
    return any(isinstance(env.get(x), _Missing) for x in node.all_input_nodes)


def build_plan(traced, problem: Problem) -> Plan:
    """The plan for a traced forward (what agent.builtin.load.trace returns): a family's, or the
    fallback's (agent.builtin.registry.fallback_plan) when none claims it."""
    if problem.fallback is not None:  # a family's plan that could not be drafted (agent.builtin.recognize)
        plan = fallback_plan(traced, problem, Unrecognized(problem.fallback))
        if plan is None:
            raise Unrecognized(problem.fallback)
        return plan
    try:
        return _family_plan(traced, problem)
    except Unrecognized as exc:
        plan = fallback_plan(traced, problem, exc)
        if plan is None:
            raise
        return plan


def _family_plan(traced, problem: Problem) -> Plan:
    import torch

    matched = matched_plan(traced)  # softmax(q kᵀ) v, a cross-entropy: one kernel each, read off the graph
    if matched is not None:
        return matched
    graph, param_names, n_inputs = traced
    b = Builder(problem)
    env: dict[Any, Any] = {}  # fx node -> ref | ("leafsrc", kind, ref, glue) | tuple of refs
    placeholders = [n for n in graph.graph.nodes if n.op == "placeholder"]
    for index, node in enumerate(placeholders):
        if index < len(param_names):
            env[node] = ("src", "param", param_names[index], [])
        else:
            env[node] = ("src", "input", index - len(param_names), [])
    output_ref = None
    missing: list[str] = []  # the ops without a template, in the forward's order
    out_glue: list[tuple[str, list[Any]]] = []
    views: dict[Any, Any] = {}

    def val(node):
        return node.meta.get("val")

    def dtype_of(node) -> str:
        v = val(node)
        if isinstance(v, (tuple, list)) and v and isinstance(v[0], torch.Tensor):  # max(dim), layer norm: the values'
            v = v[0]
        return str(v.dtype) if isinstance(v, torch.Tensor) else "torch.float32"

    def arg(x):
        """An fx argument as a ref: a leaf source becomes a Leaf (with its glue) on first use."""
        if isinstance(x, torch.fx.Node):
            value = env[x]
            if isinstance(value, tuple) and value and value[0] == "src":
                _, kind, ref, glue = value
                v = val(x)
                if str(v.dtype) not in LEAF_DTYPES:
                    raise Unrecognized(f"a {v.dtype} tensor enters the computation")
                return b.leaf(Leaf(kind, ref, glue, tuple(v.shape), tuple(v.stride()), str(v.dtype)))
            if isinstance(value, tuple) and value and value[0] == "view":
                ref, _glue, shape = value[1], value[2], value[3]
                if b.shape(ref) == shape:
                    return ref
                key = (ref, shape)
                if key not in views:
                    views[key] = b.add("ew", "view", [ref], shape, b.nodes[ref[1]].dtype)
                return views[key]
            return value
        if isinstance(x, bool):
            return bool(x)
        if isinstance(x, (int, float)):
            return float(x)
        raise Unrecognized(f"an argument of type {type(x).__name__}")

    for node in graph.graph.nodes:
        if node.op in ("placeholder",):
            continue
        if node.op == "output":
            value = env[returned(node)]
            if isinstance(value, _Missing):
                continue
            if isinstance(value, tuple) and value and value[0] == "view":
                output_ref, out_glue = value[1], value[2]
            elif isinstance(value, tuple) and value and value[0] == "node":
                output_ref = value
            else:
                raise Unrecognized("forward returns an input or parameter unchanged (or a view of one)")
            continue
        if node.op != "call_function":
            raise Unrecognized(f"graph node {node.op} {node.target}")
        name = op_name(node.target)
        overload = _overload(node.target)
        args, kwargs = node.args, dict(node.kwargs)
        dtype = dtype_of(node)
        v = val(node)
        base = name.rstrip("_") if name.endswith("_") and not name.startswith("_") else name  # in-place forms

        if _reads_missing(node, env):  # computed from an op without a template: named at the end
            env[node] = _Missing()
            continue
        if name == "getitem":
            source = env[args[0]]
            if isinstance(source, list):
                env[node] = source[args[1]]
            else:
                raise Unrecognized("indexing into a tensor")
            continue
        # glue on a leaf: record it for replay in torch
        first = env.get(args[0]) if args and isinstance(args[0], torch.fx.Node) else None
        if isinstance(first, Unusable) and base in LEAF_GLUE | FLAT_GLUE:  # a view of an unusable value
            env[node] = first
            continue
        if base != name and isinstance(first, tuple) and first and first[0] == "src":
            if first[1] == "param" and str(first[2]).endswith("num_batches_tracked") and base == "add":
                env[node] = Unusable("a batch norm's count of batches")  # the draft counts (agent.builtin.batchnorm)
                continue
            raise Unrecognized(f"aten.{name} changes an input or parameter in place")
        if base in LEAF_GLUE and isinstance(first, tuple) and first and first[0] == "src":
            if base == "_to_copy" and str(kwargs.get("dtype", v.dtype)) not in FLOAT_DTYPES:
                raise Unrecognized(f"a cast to {kwargs.get('dtype')}")
            glue_args = [list(a) if isinstance(a, (list, tuple)) else a for a in args[1:]]
            if base == "_to_copy":
                glue_args = [str(kwargs.get("dtype", v.dtype))]
            if base == "expand_as" or base == "view_as":
                base, glue_args = ("expand" if base == "expand_as" else "view"), [list(v.shape)]
            env[node] = ("src", first[1], first[2], first[3] + [(base, glue_args)])
            continue
        # flat-layout glue on a computed value: the same registers, seen with another shape
        if isinstance(first, tuple) and first and first[0] in ("node", "view"):
            if base == "_to_copy":
                target_dtype = str(kwargs.get("dtype", v.dtype))
                if target_dtype not in FLOAT_DTYPES:
                    raise Unrecognized(f"a cast to {target_dtype}")
                env[node] = b.ew("cast", [arg(args[0])], target_dtype)
                continue
            if base in FLAT_GLUE or (base in ("permute", "transpose") and _moves_ones_only(base, args)):
                if first[0] == "node" and b.shape(first) == tuple(v.shape):  # a view to the same shape
                    env[node] = first
                    continue
                ref = first[1] if first[0] == "view" else first
                glue = (first[2] if first[0] == "view" else []) + [("reshape", [list(v.shape)])]
                env[node] = ("view", ref, glue, tuple(v.shape))
                continue
            if base in ("expand", "expand_as"):  # a broadcast: computed for each element it reaches
                env[node] = b.add("ew", "expand", [arg(args[0])], tuple(v.shape), dtype)
                continue
            if base in LEAF_GLUE and base not in ("select", "slice"):  # a slice is the window ops' (scans)
                raise Unrecognized(f"aten.{base} (a transpose) of a computed value")
        if base in ("detach", "alias", "clone", "contiguous"):
            env[node] = env[args[0]]
            continue
        try:
            env[node] = lower_op(b, base, overload, node, args, kwargs, arg, dtype, v)
        except NoTemplate as exc:
            missing.append(exc.op)
            env[node] = _Missing()

    if missing:
        raise no_template(missing)
    if output_ref is None:
        raise Unrecognized("forward returns nothing the built-in kernels can write")
    out_node = b.nodes[output_ref[1]]
    out_shape = tuple(out_glue[-1][1][0]) if out_glue else out_node.shape
    return classify(b, output_ref[1], out_glue, out_shape, out_node.dtype)


def _moves_ones_only(base: str, args: list[Any]) -> bool:
    """Whether a permute or transpose moves only dims of size 1 (einsum writes such permutes around
    its batched product, KernelBench L1 11): the other dims keep their order, so the elements keep
    their row-major order and it is a reshape, flat glue."""
    source = args[0].meta["val"].shape
    if base == "transpose":
        rank = len(source)
        a, c = (int(d) % rank for d in args[1:3])
        order = list(range(rank))
        order[a], order[c] = order[c], order[a]
    else:
        order = [int(d) % len(source) for d in args[1]]
    kept = [d for d in order if source[d] != 1]
    return kept == sorted(kept)
