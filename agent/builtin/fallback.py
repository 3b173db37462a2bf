"""The `fallback` family: a forward no other family claims, lowered op by op (kernels/fallback.py.j2).

agent.builtin.lower hands the traced aten graph here when its own walk, or the classifier, finds no
plan (agent.builtin.registry.fallback_plan), so a real family always has the first word and this
one only takes what would otherwise end as `unrecognized`. The plan's nodes, in the graph's order:

- `ew`: an elementwise op of float (or bool) tensors, lowered by agent.builtin.aten as the other
  families lower it (clamp, GELU, a cast...), so agent.builtin.expressions writes it in Triton;
- `aten`: any other op (a convolution, a matrix product, pooling, softmax, a norm, a reduction,
  indexing, a view or permute), called in forward through torch as `torch.ops.aten.<op>.<overload>`
  with the traced arguments; a device the trace saw (meta) becomes the inputs' device;
- `item`: element k of an aten op's tuple result (a max's values, a norm's output);
- `red`: softmax, log-softmax, sum, mean, amax/amin or max/min's values over adjacent dims, a
  kernel of the draft's own (agent.builtin.fallback_reduce).

Every elementwise node whose value leaves the elementwise work (read by an aten op, or the output)
is computed by a kernel of its own, `fused_<i>_kernel`, from its elementwise upstream: the chain
between library ops is one launch, its operands (inputs, parameters, library results) loaded
through their broadcast strides, the work done in float32. Sizes come from the tensors at run time
(the kernels take the output's dims and each operand's strides); the numbers of the aten calls (a
view's shape) are made expressions of the inputs' sizes by agent.builtin.general, and module
floats that reach an elementwise op, or an aten op's scalar argument, are passed at run time
(agent.builtin.variants).

A forward with neither elementwise work nor such a reduction (a convolution alone, a sort) is
not drafted: its draft would only call torch, and the evaluator rejects a candidate whose forward
launches no kernel of its own (rule kernel-launched; a single-op problem's op left to torch is rule
single-op). That ends as `KeptEager` (agent.builtin.ir): the reference stays the answer, and the
policy says so in one line.
"""
from __future__ import annotations

import math
import operator
from typing import Any

from agent.builtin.aten import lower_op
from agent.builtin.builder import Builder, returned
from agent.builtin.configs import unique
from agent.builtin.expressions import expression, literal
from agent.builtin.fallback_reduce import REDUCE, forward_line, reduction
from agent.builtin.ir import FLOAT_DTYPES, KeptEager, Leaf, Node, Plan, Problem, Runtime, Unrecognized
from agent.builtin.registry import Family, register
from agent.builtin.templates import Context, common_variables, leaf_checks, local_name, render as render_template

LIBRARY, ITEM = "aten", "item"
# aten ops agent.builtin.aten lowers to elementwise nodes (a composite it lowers otherwise is left to torch)
ELEMENTWISE = {"relu", "sigmoid", "tanh", "exp", "log", "sqrt", "rsqrt", "abs", "neg", "reciprocal", "silu", "erf",
               "sin", "cos", "floor", "ceil", "square", "exp2", "log2", "log1p", "expm1", "mish", "hardswish",
               "hardsigmoid", "relu6", "selu", "sign", "logsigmoid", "add", "sub", "rsub", "mul", "div", "maximum",
               "minimum", "gt", "lt", "ge", "le", "eq", "ne", "pow", "clamp", "clip", "hardtanh", "clamp_min",
               "clamp_max", "leaky_relu", "elu", "gelu", "softplus", "where", "xlogy", "max", "min"}
PASS = {"detach", "alias", "lift_fresh_copy"}  # the same tensor
# elementwise by position: an element kept where its column less its row is at least (triu), or at
# most (tril), the diagonal, else 0 (KernelBench L1 14 and 15 were kept eager for want of it). Each
# is a kernel's own output, so the kernel's last two indices are its rows and columns
TRIANGLE = {"triu": ">=", "tril": "<="}
# private aten ops (the guard's rule private-api) as the public calls that compute the same ({k}: argument k)
PUBLIC = {"_softmax": "torch.softmax({0}, {1})", "_log_softmax": "torch.log_softmax({0}, {1})",
          "_unsafe_view": "torch.reshape({0}, {1})",
          "_adaptive_avg_pool2d": "torch.nn.functional.adaptive_avg_pool2d({0}, {1})",
          "_adaptive_avg_pool3d": "torch.nn.functional.adaptive_avg_pool3d({0}, {1})",
          "_safe_softmax": "torch.softmax({0}, {1}).masked_fill(torch.isneginf({0}).all({1}, keepdim=True), 0.0)"}
KERNEL_DTYPES = ("torch.float32", "torch.float16", "torch.bfloat16", "torch.bool")  # what a kernel reads and writes
BLOCKS = [(1024, 4), (2048, 8), (512, 4), (4096, 8), (256, 2)]


def _qualified(target: Any) -> tuple[str, str]:
    """(op, overload) of an aten target: ("convolution", "default")."""
    packet = getattr(target, "overloadpacket", None)
    name = getattr(packet, "__name__", None)
    if name is None or not str(target).startswith("aten."):
        raise Unrecognized(f"a call of {target} (not an aten op)")
    return name, getattr(target, "_overloadname", "default")


def from_graph(traced: Any, problem: Problem, why: Unrecognized) -> Plan:
    """The fallback plan of a traced forward (agent.builtin.load.trace's result) that `why` kept
    from every other family."""
    import torch

    graph, param_names, _ = traced
    b = Builder(problem)
    env: dict[Any, Any] = {}
    placeholders = [n for n in graph.graph.nodes if n.op == "placeholder"]
    for index, node in enumerate(placeholders):
        env[node] = ("src", "param", param_names[index]) if index < len(param_names) else \
            ("src", "input", index - len(param_names))
    leaf_of: dict[Any, tuple[str, int]] = {}

    def ref(x: Any) -> Any:
        """An fx value as the plan sees it: a leaf on first use, a node ref, or a Python value."""
        if isinstance(x, torch.fx.Node):
            value = env[x]
            if isinstance(value, tuple) and value[0] == "src":
                if x not in leaf_of:
                    v = x.meta["val"]
                    leaf_of[x] = b.leaf(Leaf(value[1], value[2], [], tuple(v.shape), tuple(v.stride()), str(v.dtype)))
                return leaf_of[x]
            return value
        if isinstance(x, (list, tuple)):
            return [ref(a) for a in x]
        return x

    def operand(x: Any) -> Any:  # what lower_op's elementwise cases take: a tensor ref or a float
        value = ref(x)
        if isinstance(value, tuple) and value[0] in ("leaf", "node"):
            if _dtype(b, value) not in KERNEL_DTYPES:
                raise Unrecognized(f"a {_dtype(b, value)} operand")
            return value
        if isinstance(value, (bool, int, float)):
            return value if isinstance(value, bool) else float(value)
        raise Unrecognized(f"an operand {value!r}")

    out_ref = None
    for node in graph.graph.nodes:
        if node.op == "placeholder":
            continue
        if node.op == "output":
            out_ref = ref(returned(node))
            continue
        if node.op == "get_attr":  # a constant the forward made (torch.tensor(self.value)): made again in forward
            c = _constant(graph, node.target)
            env[node] = b.add(LIBRARY, "full.default", [list(c.shape), c.item()], _shape(c), str(c.dtype),
                              kwargs={"dtype": c.dtype, "device": torch.device("meta")})
            continue
        if node.op != "call_function":
            raise Unrecognized(f"graph node {node.op} {node.target}")
        v = node.meta.get("val")
        if node.target is operator.getitem:
            source = ref(node.args[0])
            if isinstance(source, tuple) and source[0] == "node" and b.nodes[source[1]].op == REDUCE:
                # max/min's values; reduction() took it only where its indices are read by nothing
                env[node] = source if node.args[1] == 0 else ("unusable", "max/min's indices")
                continue
            if not (isinstance(source, tuple) and source[0] == "node" and b.nodes[source[1]].op == LIBRARY):
                raise Unrecognized("an element of a value that is not an aten op's tuple")
            env[node] = b.add(ITEM, "getitem", [source, int(node.args[1])], _shape(v), _dtype_of(v))
            continue
        name, overload = _qualified(node.target)
        base = name.rstrip("_") if name.endswith("_") and not name.startswith("_") else name  # in-place forms
        if base != name:
            first = env.get(node.args[0]) if node.args and isinstance(node.args[0], torch.fx.Node) else None
            if isinstance(first, tuple) and first[0] == "src":
                env[node] = ("unusable", f"aten.{name} changes an input or parameter in place")
                continue
        if base in PASS:
            env[node] = env[node.args[0]]
            continue
        if any(isinstance(env.get(x), tuple) and env[x][0] == "unusable" for x in node.all_input_nodes):
            env[node] = next(env[x] for x in node.all_input_nodes if env[x][0] == "unusable")
            continue
        if base in TRIANGLE and isinstance(v, torch.Tensor) and v.dim() >= 2 and str(v.dtype) in KERNEL_DTYPES[:3]:
            diagonal = node.args[1] if len(node.args) > 1 else node.kwargs.get("diagonal", 0)
            if isinstance(diagonal, int):
                env[node] = b.add("ew", base, [operand(node.args[0])], _shape(v), str(v.dtype), diagonal=diagonal)
                continue
        if (reduced := reduction(base, overload, node)) is not None:
            values = v[0] if isinstance(v, (tuple, list)) else v
            env[node] = b.add(REDUCE, base, [operand(node.args[0])], _shape(values), str(values.dtype), **reduced)
            continue
        if base in ELEMENTWISE and isinstance(v, torch.Tensor) and str(v.dtype) in KERNEL_DTYPES:
            mark = len(b.nodes)
            try:
                lowered = lower_op(b, base, overload, node, node.args, dict(node.kwargs), operand, str(v.dtype), v)
            except Unrecognized:
                lowered = None
            if isinstance(lowered, tuple) and lowered[0] == "node" and all(n.op == "ew" for n in b.nodes[mark:]) \
                    and b.nodes[lowered[1]].shape == tuple(v.shape):
                env[node] = lowered
                continue
            del b.nodes[mark:]  # not elementwise after all (or not as the kernels read it): torch's
        args = [ref(a) for a in node.args]
        kwargs = {k: ref(a) for k, a in node.kwargs.items()}
        op = f"{name}.{overload}"  # an in-place op on a computed value stays one, as in eager
        if base == "_to_copy" and set(kwargs) <= {"dtype", "layout", "device", "memory_format"} \
                and kwargs.get("memory_format") in (None, torch.preserve_format):  # a cast (of an int64 value)
            op, args, kwargs = "to.dtype", args[:1] + [kwargs.get("dtype", v.dtype)], {}
        elif base.startswith("_") and base not in PUBLIC:
            raise Unrecognized(f"aten.{base} (a private op the guard refuses in a draft)")
        env[node] = b.add(LIBRARY, op, args, _shape(v), _dtype_of(v), kwargs=kwargs)
    if isinstance(out_ref, tuple) and out_ref and out_ref[0] == "unusable":
        raise Unrecognized(out_ref[1])
    if out_ref is None or not (isinstance(out_ref, tuple) and out_ref[0] == "node"):
        raise Unrecognized("forward returns an input or parameter unchanged (or nothing the kernels write)")
    return _plan(b, out_ref[1], why)


def _constant(graph: Any, name: str) -> Any:
    """A tensor constant of the traced graph, when it is one number."""
    import torch

    value = getattr(graph, name)
    if not isinstance(value, torch.Tensor) or value.numel() != 1 or value.device.type == "meta":
        raise Unrecognized(f"a constant tensor {name} of the traced forward")
    return value


def _shape(v: Any) -> tuple[int, ...]:
    return tuple(int(s) for s in v.shape) if hasattr(v, "shape") else ()


def _dtype_of(v: Any) -> str:
    if isinstance(v, (tuple, list)):
        return "tuple"
    return str(v.dtype) if hasattr(v, "dtype") else type(v).__name__


def _dtype(b: Builder, r: tuple[str, int]) -> str:
    return b.leaves[r[1]].dtype if r[0] == "leaf" else b.nodes[r[1]].dtype


def _refs(value: Any) -> list[tuple[str, int]]:
    if isinstance(value, tuple) and value and value[0] in ("leaf", "node"):
        return [value]
    if isinstance(value, (list, tuple)):
        return [r for a in value for r in _refs(a)]
    if isinstance(value, dict):
        return [r for a in value.values() for r in _refs(a)]
    return []


def _plan(b: Builder, out: int, why: Unrecognized) -> Plan:
    """The live nodes (those the output reads), renumbered; or KeptEager when none is elementwise."""
    live, stack = set(), [out]
    while stack:
        i = stack.pop()
        if i not in live:
            live.add(i)
            stack += [r[1] for r in _refs(b.nodes[i].args) + _refs(b.nodes[i].attrs) if r[0] == "node"]
    remap = {old: new for new, old in enumerate(sorted(live))}
    used = sorted({r[1] for i in live for r in _refs(b.nodes[i].args) + _refs(b.nodes[i].attrs) if r[0] == "leaf"})
    lmap = {old: new for new, old in enumerate(used)}

    def renumber(value: Any) -> Any:
        if isinstance(value, tuple) and value and value[0] in ("leaf", "node"):
            return (value[0], (lmap if value[0] == "leaf" else remap)[value[1]])
        if isinstance(value, list):
            return [renumber(a) for a in value]
        if isinstance(value, dict):
            return {k: renumber(a) for k, a in value.items()}
        return value

    nodes = []
    for old in sorted(live):
        n = b.nodes[old]
        nodes.append(Node(n.op, n.name, renumber(n.args), n.shape, n.dtype, renumber(n.attrs)))
    leaves = [b.leaves[k] for k in used]
    library = sorted({f"aten.{n.name.split('.')[0]}" for n in nodes if n.op == LIBRARY})
    if not any(n.op in ("ew", REDUCE) for n in nodes):
        raise KeptEager(f"kept eager: no family claims the forward ({why}), and it has no elementwise work to fuse "
                        f"nor a reduction for a kernel of its own: "
                        f"a draft would only call {', '.join(library) or 'torch'} through torch and launch no kernel "
                        f"of its own, which the evaluator rejects (rules kernel-launched, single-op); the reference "
                        f"stays the answer")
    if not leaves:
        raise Unrecognized("forward reads no input or parameter")
    out_node = nodes[remap[out]]
    if out_node.dtype not in FLOAT_DTYPES + ("torch.bool", "torch.int64", "torch.int32"):
        raise Unrecognized(f"the output is {out_node.dtype}")
    plan = Plan(kind="fallback", leaves=leaves, nodes=nodes, out=remap[out], out_glue=[], out_shape=out_node.shape,
                out_dtype=out_node.dtype)
    kernels = len(materialized(plan))
    reductions = sorted({n.name.lstrip("_") for n in nodes if n.op == REDUCE})
    plan.summary = (f"no family claims it ({why}); lowered op by op: {', '.join(library) or 'no library op'} in torch, "
                    f"{kernels} fused elementwise kernel{'s' if kernels != 1 else ''}"
                    + (f", {', '.join(reductions)} by reduction kernels" if reductions else ""))
    return plan


# --- drafting --------------------------------------------------------------------------------------


def materialized(plan: Plan) -> list[int]:
    """The elementwise nodes whose value leaves the elementwise work (each is one kernel's output)."""
    readers: dict[int, set[str]] = {}
    for n in plan.nodes:
        for r in _refs(n.args) + _refs(n.attrs):
            if r[0] == "node":
                readers.setdefault(r[1], set()).add(n.op)
    return [i for i, n in enumerate(plan.nodes)
            if n.op == "ew" and (i == plan.out or readers.get(i, set()) - {"ew"} or n.name in TRIANGLE)]


def _closure(plan: Plan, m: int, outputs: set[int]) -> tuple[list[int], list[tuple[str, int]]]:
    """The elementwise nodes kernel m computes (in order) and its operands (refs it loads)."""
    inside, operands, stack = set(), [], [m]
    while stack:
        i = stack.pop()
        if i in inside:
            continue
        inside.add(i)
        for a in plan.nodes[i].args:
            if not (isinstance(a, tuple) and a and a[0] in ("leaf", "node")):
                continue
            if a[0] == "node" and plan.nodes[a[1]].op == "ew" and a[1] not in outputs:
                stack.append(a[1])
            elif a not in operands:
                operands.append(a)
    return sorted(inside), sorted(operands)


def _kernel(plan: Plan, m: int, outputs: set[int]) -> tuple[dict[str, Any], list[tuple[str, int]], list[Runtime]]:
    """The kernel computing node m: its rank, loads and statements; its operands and run-time scalars."""
    inside, operands = _closure(plan, m, outputs)
    rank = len(plan.nodes[m].shape)
    names = {r: f"x{k}" for k, r in enumerate(operands)}
    lines, scalars = [], []
    for i in inside:
        node = plan.nodes[i]
        args = []
        for a in node.args:
            if isinstance(a, tuple) and a and a[0] in ("leaf", "node"):
                args.append(names[a] if a in names else f"t{a[1]}")
            else:
                if isinstance(a, Runtime) and a not in scalars and a.name not in {s.name for s in scalars}:
                    scalars.append(a)
                args.append(literal(a))
        if node.name in TRIANGLE:  # node m itself (materialized): its rows and columns are the last two indices
            expr, pre = (f"tl.where(i{rank - 1} - i{rank - 2} {TRIANGLE[node.name]} {node.attrs['diagonal']}, "
                         f"{args[0]}, 0.0)"), []
        else:
            expr, pre = expression(node, args)
        lines += pre + [f"t{i} = {expr}"]
    kernel = {"name": f"fused_{m}_kernel", "rank": rank, "operands": len(operands), "body": lines,
              "result": f"t{m}", "scalars": [s.name for s in scalars]}
    return kernel, operands, scalars


def _source(value: Any, device: str, scalars: dict[str, str]) -> str:
    """An aten call's argument as forward's source."""
    import torch

    if isinstance(value, tuple) and value and value[0] in ("leaf", "node"):
        return f"in{value[1]}" if value[0] == "leaf" else f"v{value[1]}"
    if isinstance(value, list):
        return "[" + ", ".join(_source(a, device, scalars) for a in value) + "]"
    if isinstance(value, Runtime):
        return scalars.get(value.name, literal(value))
    if isinstance(value, torch.device):
        return device
    if isinstance(value, (torch.dtype, torch.layout, torch.memory_format)):
        return str(value)
    if isinstance(value, float) and not math.isfinite(value):
        return literal(value)
    if value is None or isinstance(value, (bool, int, float, str)):
        return repr(value)
    raise Unrecognized(f"an aten argument of type {type(value).__name__}")


def render(plan: Plan, problem: Problem, config: dict[str, Any], ctx: Context) -> str:
    variants = problem.variants
    exprs = {s.name: s.expr for s in (variants.scalars if variants is not None else [])}
    device, shape = local_name("device", problem), local_name("shape", problem)
    outputs = set(materialized(plan))
    kernels, forward = [], [f"{device} = in0.device"]
    for i, node in enumerate(plan.nodes):
        if node.op == ITEM:
            forward.append(f"v{i} = v{node.args[0][1]}[{node.args[1]}]")
        elif node.op == REDUCE:
            forward.append(forward_line(i, _source(node.args[0], device, exprs), node.attrs))
        elif node.op == LIBRARY:
            op, overload = node.name.split(".")
            args = [_source(a, device, exprs) for a in node.args]
            args += [f"{k}={_source(a, device, exprs)}" for k, a in node.attrs.get("kwargs", {}).items()]
            call = PUBLIC[op].format(*args) if op in PUBLIC else f"torch.ops.aten.{op}.{overload}({', '.join(args)})"
            forward.append(f"v{i} = {call}")
        elif i in outputs:
            kernel, operands, scalars = _kernel(plan, i, outputs)
            kernels.append(kernel)
            srcs = [_source(r, device, exprs) for r in operands]
            shapes = ", ".join(f"{s}.shape" for s in srcs)
            forward.append(f"{shape} = torch.broadcast_shapes({shapes})")
            ops = [f"e{k}" for k in range(len(srcs))]
            forward.append(f"{', '.join(ops)}, = {', '.join(f'{s}.expand({shape})' for s in srcs)},")
            forward.append(f"v{i} = torch.empty({shape}, device={device}, dtype={node.dtype})")
            launch = "".join(f"{e}, *{e}.stride(), " for e in ops) + f"v{i}, "
            launch += "".join(f"{exprs[s.name]}, " for s in scalars)
            forward.append(f"{kernel['name']}[(triton.cdiv(v{i}.numel(), {config['BLOCK']}),)]({launch}*{shape}, "
                           f"v{i}.numel(), BLOCK={config['BLOCK']}, I64=_needs_i64(v{i}, {', '.join(ops)}), "
                           f"num_warps={config['num_warps']})")
    variables = common_variables(plan, problem, config, ctx)
    variables.update(leaf_checks=leaf_checks(plan, problem))
    return render_template("fallback.py.j2", kernels=kernels, forward=forward, result=f"v{plan.out}",
                           reduces=any(n.op == REDUCE for n in plan.nodes), **variables)


def space(plan: Plan) -> list[dict[str, Any]]:
    """The elementwise kernels' block and warps (every one correct at any size)."""
    return unique([{"BLOCK": b, "num_warps": w} for b, w in BLOCKS])


FAMILY = register(Family(kind="fallback", render=render, space=space, from_graph=from_graph))
