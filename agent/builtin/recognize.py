"""Recognition: trace the problem's forward with torch.fx (make_fx, aten level, on meta tensors)
and turn it into a small IR the kernel templates can be drafted from, or say why not.

The problem file is the user's own (trusted) code: it is imported here, in-process, and its model
is built on the meta device, so nothing is allocated whatever the problem's sizes. The candidate
code drafted from the IR is what runs in the evaluator's sandbox, never this.

The IR is a list of nodes in topological order over "leaves" (forward inputs and parameters,
each with the glue ops - views, transposes, expands - applied to it before use). A node is
elementwise (`ew`), a reduction over trailing or middle dims (`reduce`: sum, max, min), or a
matrix product (`mm`: 2-d or batched). Composite aten ops (softmax, log-softmax, layer norm,
var, mean, vector norms, addmm, linear) are expanded into those primitives here, so each kernel
template only needs the primitives. A plan picks the template:

- `pointwise`: only elementwise nodes;
- `rowwise`: elementwise nodes and reductions, all over the same trailing dims of one shape
  (softmax, log-softmax, layer/RMS norm, row reductions with elementwise epilogues);
- `colwise`: the same over a block of middle dims (sum over dim 1 of [B, R, N], softmax over channels);
- `matmul`: one matrix product, its operands leaves, followed by an elementwise epilogue.
"""
from __future__ import annotations

import ast
import importlib.util
import inspect
import itertools
import math
import operator
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

FLOAT_DTYPES = ("torch.float32", "torch.float16", "torch.bfloat16", "torch.float64")

# aten glue ops replayed in torch on a leaf (views and copies; see tools.instrument.GLUE_OPS)
LEAF_GLUE = {"view", "_unsafe_view", "reshape", "t", "transpose", "permute", "expand", "unsqueeze", "squeeze",
             "alias", "detach", "clone", "contiguous", "_to_copy", "expand_as", "view_as", "lift_fresh_copy"}
# glue on a computed value that keeps its flat (row-major) layout: same registers in the kernel
FLAT_GLUE = {"view", "_unsafe_view", "reshape", "unsqueeze", "squeeze", "alias", "detach", "clone", "contiguous",
             "view_as", "flatten"}

UNARY = {"relu", "sigmoid", "tanh", "exp", "log", "sqrt", "rsqrt", "abs", "neg", "reciprocal", "silu", "erf",
         "sin", "cos", "floor", "ceil", "square", "exp2", "log2", "log1p", "expm1", "mish", "hardswish",
         "hardsigmoid", "relu6", "selu", "sign", "logsigmoid"}
BINARY = {"add", "sub", "mul", "div", "maximum", "minimum", "rsub", "gt", "lt", "ge", "le", "eq", "ne", "pow"}


class Unrecognized(Exception):
    """The forward holds something the built-in policy has no template for; str() says what."""


@dataclass
class Leaf:
    """A forward input (`input`, its position) or a parameter/buffer (`param`, its dotted name),
    with the glue ops applied to it, and the resulting tensor's shape and strides (elements)."""

    kind: str
    ref: Any
    glue: list[tuple[str, list[Any]]]
    shape: tuple[int, ...]
    strides: tuple[int, ...]
    dtype: str


@dataclass
class Node:
    op: str  # ew | reduce | mm
    name: str  # ew: the op (add, relu...); reduce: sum | max | min; mm: mm | bmm
    args: list[Any]  # ("leaf", i) | ("node", j) | python scalars
    shape: tuple[int, ...]
    dtype: str
    attrs: dict[str, Any] = field(default_factory=dict)


@dataclass
class Plan:
    kind: str  # pointwise | rowwise | colwise | matmul
    leaves: list[Leaf]
    nodes: list[Node]
    out: int  # the node holding the output (before out_glue)
    out_glue: list[tuple[str, list[Any]]]
    out_shape: tuple[int, ...]
    out_dtype: str
    # rowwise / colwise: the full shape reduced and the reduced dims (a contiguous block)
    full_shape: tuple[int, ...] = ()
    red_dims: tuple[int, ...] = ()
    summary: str = ""

    @property
    def patterns(self) -> list[str]:
        return sorted({n.attrs.get("pattern") for n in self.nodes if n.attrs.get("pattern")})


@dataclass
class Problem:
    """What the draft needs from the problem file besides the plan."""

    path: Path
    entry: str
    source: str
    init_source: str  # ModelNew.__init__ (the reference's, renamed), indented for the class body
    prelude: str  # imports and module-level definitions __init__ needs
    forward_params: str  # the forward's parameter list after self
    input_names: list[str]
    param_exprs: dict[str, str]  # parameter name -> expression on self


@dataclass
class Recognition:
    problem: Problem | None
    plan: Plan | None
    reason: str | None  # why nothing was recognized (one line)
    load_error: bool = False  # the problem itself would not load: the evaluator reports it


def recognize(path: str | Path, entry: str = "Model") -> Recognition:
    """Trace and classify; never raises for an unrecognized or broken problem."""
    path = Path(path)
    try:
        module, model, inputs = _load(path, entry)
    except Unrecognized as exc:
        return Recognition(None, None, str(exc), load_error=True)
    except Exception as exc:  # the user's file failed to import or build: the evaluator says why
        return Recognition(None, None, f"could not build {entry} on the meta device ({type(exc).__name__}: "
                                       f"{' '.join(str(exc).split())[:160]})", load_error=True)
    try:
        problem = _describe(path, entry, module, model, inputs)
        plan = _plan(_trace(model, inputs), problem)
        _check_draft(plan, problem)
    except Unrecognized as exc:
        return Recognition(None, None, str(exc))
    except Exception as exc:  # tracing failed (data-dependent control flow, unsupported op...)
        return Recognition(None, None, f"could not trace {entry}.forward ({type(exc).__name__}: "
                                       f"{' '.join(str(exc).split())[:160]})")
    return Recognition(problem, plan, None)


def _check_draft(plan: Plan, problem: Problem) -> None:
    """Draft the first configuration once: what the templates cannot express, or what the
    evaluator's static guard would reject (in the copied constructor), is not recognized."""
    from agent.builtin import codegen, search
    from tools import guard

    source = codegen.draft(plan, problem, search.space(plan)[0])
    violations = guard.check(source).violations
    if violations:
        raise Unrecognized(f"the drafted module breaks the guard's rule {violations[0].rule} "
                           f"(line {violations[0].line}: {violations[0].message})")


# --- loading and tracing -------------------------------------------------------------------------


_LOADED = itertools.count()


def _load(path: Path, entry: str):
    import torch

    name = f"_ratchet_builtin_problem_{next(_LOADED)}"
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise Unrecognized(f"{path}: not a Python module")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    finally:
        sys.modules.pop(name, None)
    cls = getattr(module, entry, None)
    if cls is None or not hasattr(module, "get_inputs"):
        raise Unrecognized(f"{path}: no class {entry} or no get_inputs()")
    with torch.device("meta"):
        init = list(getattr(module, "get_init_inputs", lambda: [])())
        torch.manual_seed(0)
        model = cls(*init)
        inputs = list(module.get_inputs())
    return module, model, inputs


def _trace(model, inputs):
    import torch
    from torch.fx.experimental.proxy_tensor import make_fx
    from torch.func import functional_call

    for index, value in enumerate(inputs):
        if not isinstance(value, torch.Tensor):
            raise Unrecognized(f"input {index} is not a tensor ({type(value).__name__})")
        if str(value.dtype) not in FLOAT_DTYPES or value.dtype == torch.float64:
            raise Unrecognized(f"input {index} is {value.dtype}; the built-in kernels handle float32/16 and bfloat16")
    state = {**dict(model.named_parameters()), **dict(model.named_buffers())}
    names = list(state)

    def run(params, *args):
        return functional_call(model, params, args)

    with torch.no_grad():
        graph = make_fx(run)(state, *inputs)
    return graph, names, len(inputs)


# --- the problem's constructor and signature, for ModelNew ----------------------------------------


def _describe(path: Path, entry: str, module, model, inputs) -> Problem:
    import torch.nn as nn

    source = path.read_text()
    tree = ast.parse(source)
    cls_node = next((n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == entry), None)
    if cls_node is None:
        raise Unrecognized(f"no class {entry} at the top level of {path.name}")
    cls = getattr(module, entry)
    if cls.__bases__ != (nn.Module,):
        raise Unrecognized(f"{entry} derives from {', '.join(b.__name__ for b in cls.__bases__)}, not nn.Module alone")
    init = next((n for n in cls_node.body if isinstance(n, ast.FunctionDef) and n.name == "__init__"), None)
    if init is None:
        init_source = "    def __init__(self):\n        super().__init__()\n"
        needed: set[str] = set()
    else:
        renamed = _Rename(entry).visit(ast.parse(ast.unparse(init)))
        ast.fix_missing_locations(renamed)
        init_source = _indent(ast.unparse(renamed), 4) + "\n"
        needed = {n.id for n in ast.walk(init) if isinstance(n, ast.Name)}
    prelude = _prelude(tree, needed, entry)
    signature = inspect.signature(cls.forward)
    params = list(signature.parameters.values())[1:]
    if any(p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD, p.KEYWORD_ONLY) for p in params):
        raise Unrecognized(f"{entry}.forward takes *args, **kwargs or keyword-only arguments")
    if len(params) < len(inputs) or any(p.default is p.empty for p in params[len(inputs):]):
        raise Unrecognized(f"{entry}.forward does not take get_inputs() positionally")
    forward_params = "".join(", " + str(p).split(":")[0].split("=")[0].strip() for p in params[:len(inputs)])
    input_names = [p.name for p in params[:len(inputs)]]
    state_names = [*dict(model.named_parameters()), *dict(model.named_buffers())]
    return Problem(path=path, entry=entry, source=source, init_source=init_source, prelude=prelude,
                   forward_params=forward_params, input_names=input_names,
                   param_exprs={name: _attr_expr(name) for name in state_names})


class _Rename(ast.NodeTransformer):
    def __init__(self, entry: str) -> None:
        self.entry = entry

    def visit_Name(self, node: ast.Name) -> ast.Name:
        if node.id == self.entry:
            return ast.copy_location(ast.Name(id="ModelNew", ctx=node.ctx), node)
        return node


def _indent(text: str, spaces: int) -> str:
    pad = " " * spaces
    return "\n".join(pad + line if line.strip() else line for line in text.splitlines())


def _prelude(tree: ast.Module, needed: set[str], entry: str) -> str:
    """Allowed imports of the reference and the module-level definitions __init__ uses (transitively)."""
    from tools.guard import ALLOWED_IMPORTS

    defs: dict[str, ast.stmt] = {}
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.ClassDef)) and node.name not in (entry, "get_inputs", "get_init_inputs"):
            defs[node.name] = node
        elif isinstance(node, ast.Assign):
            for target in node.targets:
                for name in ast.walk(target):
                    if isinstance(name, ast.Name):
                        defs[name.id] = node
    keep: list[ast.stmt] = []
    todo = [n for n in needed if n in defs]
    seen: set[int] = set()
    while todo:
        stmt = defs[todo.pop()]
        if id(stmt) in seen:
            continue
        seen.add(id(stmt))
        keep.append(stmt)
        todo.extend(n.id for n in ast.walk(stmt) if isinstance(n, ast.Name) and n.id in defs)
    imports = [n for n in tree.body if isinstance(n, (ast.Import, ast.ImportFrom)) and not getattr(n, "level", 0)
               and all((a.name if isinstance(n, ast.Import) else (n.module or "")).split(".")[0] in ALLOWED_IMPORTS
                       for a in n.names)]
    order = {id(n): i for i, n in enumerate(tree.body)}
    lines = [ast.unparse(n) for n in imports]
    lines += [ast.unparse(n) for n in sorted(keep, key=lambda n: order[id(n)])]
    return "\n".join(lines)


def _attr_expr(name: str) -> str:
    expr = "self"
    for part in name.split("."):
        expr += f"[{part}]" if part.isdigit() else f".{part}"
    return expr


# --- from the aten graph to the IR ------------------------------------------------------------------


def _packet(target) -> str:
    if target is operator.getitem:
        return "getitem"
    packet = getattr(target, "overloadpacket", None)
    return getattr(packet, "__name__", str(target)) if packet is not None else str(target)


def _overload(target) -> str:
    return getattr(target, "_overloadname", "default")


class _Builder:
    def __init__(self, problem: Problem) -> None:
        self.problem = problem
        self.leaves: list[Leaf] = []
        self.nodes: list[Node] = []

    # refs
    def leaf(self, leaf: Leaf) -> tuple[str, int]:
        self.leaves.append(leaf)
        return ("leaf", len(self.leaves) - 1)

    def add(self, op: str, name: str, args: list[Any], shape, dtype: str, **attrs: Any) -> tuple[str, int]:
        self.nodes.append(Node(op, name, list(args), tuple(int(s) for s in shape), dtype, attrs))
        return ("node", len(self.nodes) - 1)

    def shape(self, ref) -> tuple[int, ...]:
        if not isinstance(ref, tuple):
            return ()
        return self.leaves[ref[1]].shape if ref[0] == "leaf" else self.nodes[ref[1]].shape

    def ew(self, name: str, args: list[Any], dtype: str, **attrs: Any):
        shape = _broadcast([self.shape(a) for a in args])
        return self.add("ew", name, args, shape, dtype, **attrs)

    def reduce(self, name: str, x, dims: tuple[int, ...], keepdim: bool, dtype: str, **attrs: Any):
        shape = self.shape(x)
        dims = tuple(sorted(d % len(shape) for d in dims)) if shape else ()
        if not dims:
            raise Unrecognized("a reduction over all dimensions (a scalar result)")
        out = tuple(1 if i in dims else s for i, s in enumerate(shape)) if keepdim else \
            tuple(s for i, s in enumerate(shape) if i not in dims)
        return self.add("reduce", name, [x], out, dtype, dims=dims, keepdim=keepdim, **attrs)

    def mean(self, x, dims, keepdim, dtype, **attrs):
        shape = self.shape(x)
        dims = tuple(d % len(shape) for d in dims)
        count = math.prod(shape[d] for d in dims)
        total = self.reduce("sum", x, dims, keepdim, dtype, **attrs)
        return self.ew("mul", [total, 1.0 / count], dtype)


def _broadcast(shapes: list[tuple[int, ...]]) -> tuple[int, ...]:
    rank = max((len(s) for s in shapes), default=0)
    out = [1] * rank
    for shape in shapes:
        for i, size in enumerate(shape):
            j = rank - len(shape) + i
            if out[j] == 1:
                out[j] = size
            elif size not in (1, out[j]):
                raise Unrecognized(f"shapes {shapes} do not broadcast")
    return tuple(out)


def _plan(traced, problem: Problem) -> Plan:
    import torch

    graph, param_names, n_inputs = traced
    b = _Builder(problem)
    env: dict[Any, Any] = {}  # fx node -> ref | ("leafsrc", kind, ref, glue) | tuple of refs
    placeholders = [n for n in graph.graph.nodes if n.op == "placeholder"]
    for index, node in enumerate(placeholders):
        if index < len(param_names):
            env[node] = ("src", "param", param_names[index], [])
        else:
            env[node] = ("src", "input", index - len(param_names), [])
    output_ref = None
    out_glue: list[tuple[str, list[Any]]] = []
    views: dict[Any, Any] = {}

    def val(node):
        return node.meta.get("val")

    def dtype_of(node) -> str:
        v = val(node)
        return str(v.dtype) if isinstance(v, torch.Tensor) else "torch.float32"

    def arg(x):
        """An fx argument as a ref: a leaf source becomes a Leaf (with its glue) on first use."""
        if isinstance(x, torch.fx.Node):
            value = env[x]
            if isinstance(value, tuple) and value and value[0] == "src":
                _, kind, ref, glue = value
                v = val(x)
                if str(v.dtype) not in FLOAT_DTYPES:
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
            outs = node.args[0]
            outs = list(outs) if isinstance(outs, (list, tuple)) else [outs]
            if len(outs) != 1 or not isinstance(outs[0], torch.fx.Node):
                raise Unrecognized(f"forward returns {len(outs)} values; the built-in kernels write one tensor")
            value = env[outs[0]]
            if isinstance(value, tuple) and value and value[0] == "view":
                output_ref, out_glue = value[1], value[2]
            elif isinstance(value, tuple) and value and value[0] == "node":
                output_ref = value
            else:
                raise Unrecognized("forward returns an input or parameter unchanged (or a view of one)")
            continue
        if node.op != "call_function":
            raise Unrecognized(f"graph node {node.op} {node.target}")
        name = _packet(node.target)
        overload = _overload(node.target)
        args, kwargs = node.args, dict(node.kwargs)
        dtype = dtype_of(node)
        v = val(node)
        base = name.rstrip("_") if name.endswith("_") and not name.startswith("_") else name  # in-place forms

        if name == "getitem":
            source = env[args[0]]
            if isinstance(source, list):
                env[node] = source[args[1]]
            else:
                raise Unrecognized("indexing into a tensor")
            continue
        # glue on a leaf: record it for replay in torch
        first = env.get(args[0]) if args and isinstance(args[0], torch.fx.Node) else None
        if base != name and isinstance(first, tuple) and first and first[0] == "src":
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
            if base in FLAT_GLUE:
                ref = first[1] if first[0] == "view" else first
                glue = (first[2] if first[0] == "view" else []) + [("reshape", [list(v.shape)])]
                env[node] = ("view", ref, glue, tuple(v.shape))
                continue
            if base in ("expand", "expand_as"):  # a broadcast: computed for each element it reaches
                env[node] = b.add("ew", "expand", [arg(args[0])], tuple(v.shape), dtype)
                continue
            if base in LEAF_GLUE:
                raise Unrecognized(f"aten.{base} (a transpose) of a computed value")
        if base in ("detach", "alias", "clone", "contiguous"):
            env[node] = env[args[0]]
            continue
        env[node] = _lower(b, base, overload, node, args, kwargs, arg, dtype, v)

    if output_ref is None:
        raise Unrecognized("forward returns nothing the built-in kernels can write")
    out_node = b.nodes[output_ref[1]]
    out_shape = tuple(out_glue[-1][1][0]) if out_glue else out_node.shape
    return _classify(b, output_ref[1], out_glue, out_shape, out_node.dtype)


def _lower(b: _Builder, name: str, overload: str, node, args, kwargs, arg, dtype: str, v):
    """One aten op as IR nodes (composites expanded). Returns the ref, or a list for tuple results."""
    shape = tuple(v.shape) if hasattr(v, "shape") else None
    if name in UNARY:
        return b.ew(name, [arg(args[0])], dtype)
    if name in ("add", "sub") and len(args) >= 2:
        alpha = kwargs.get("alpha", 1)
        other = arg(args[1])
        if alpha != 1:
            other = b.ew("mul", [other, float(alpha)], dtype)
        return b.ew(name, [arg(args[0]), other], dtype)
    if name == "rsub":
        alpha = kwargs.get("alpha", 1)
        x = arg(args[0])
        if alpha != 1:
            x = b.ew("mul", [x, float(alpha)], dtype)
        return b.ew("sub", [arg(args[1]), x], dtype)
    if name == "div":
        if kwargs.get("rounding_mode") is not None:
            raise Unrecognized(f"division with rounding_mode={kwargs['rounding_mode']}")
        return b.ew("div", [arg(args[0]), arg(args[1])], dtype)
    if name in ("mul", "maximum", "minimum", "gt", "lt", "ge", "le", "eq", "ne"):
        return b.ew(name, [arg(args[0]), arg(args[1])], dtype)
    if name == "pow":
        if overload == "Tensor_Scalar":
            p = float(args[1])
            if p not in (0.5, -0.5) and (p != int(p) or abs(p) > 8):
                raise Unrecognized(f"x ** {p}")
            return b.ew("pow", [arg(args[0]), p], dtype)
        if overload == "Scalar":
            return b.ew("exp", [b.ew("mul", [arg(args[1]), math.log(float(args[0]))], dtype)], dtype)
        raise Unrecognized("pow with a tensor exponent")
    if name in ("clamp", "clip", "hardtanh", "clamp_min", "clamp_max"):
        lo = args[1] if len(args) > 1 else kwargs.get("min")
        hi = args[2] if len(args) > 2 else kwargs.get("max")
        if name == "hardtanh":
            lo = args[1] if len(args) > 1 else -1.0
            hi = args[2] if len(args) > 2 else 1.0
        if name == "clamp_max":
            lo, hi = None, args[1]
        if any(isinstance(x, torch_node_type()) for x in (lo, hi)):
            raise Unrecognized("clamp with tensor bounds")
        x = arg(args[0])
        if lo is not None:
            x = b.ew("maximum", [x, float(lo)], dtype)
        if hi is not None:
            x = b.ew("minimum", [x, float(hi)], dtype)
        return x
    if name == "leaky_relu":
        return b.ew("leaky_relu", [arg(args[0])], dtype, slope=float(args[1]) if len(args) > 1 else 0.01)
    if name == "elu":
        alpha = float(args[1]) if len(args) > 1 else 1.0
        scale = float(args[2]) if len(args) > 2 else 1.0
        input_scale = float(args[3]) if len(args) > 3 else 1.0
        return b.ew("elu", [arg(args[0])], dtype, alpha=alpha, scale=scale, input_scale=input_scale)
    if name == "gelu":
        return b.ew("gelu", [arg(args[0])], dtype, approximate=kwargs.get("approximate", "none"))
    if name == "softplus":
        beta = float(args[1]) if len(args) > 1 else 1.0
        threshold = float(args[2]) if len(args) > 2 else 20.0
        return b.ew("softplus", [arg(args[0])], dtype, beta=beta, threshold=threshold)
    if name == "where":
        return b.ew("where", [arg(args[0]), arg(args[1]), arg(args[2])], dtype)
    # reductions
    if name in ("amax", "amin") or (name in ("sum", "mean") and overload != "default"):
        dims = args[1] if len(args) > 1 else kwargs.get("dim")
        keepdim = bool(args[2] if len(args) > 2 else kwargs.get("keepdim", False))
        if dims is None:
            raise Unrecognized(f"{name} over all dimensions")
        dims = tuple([dims] if isinstance(dims, int) else dims)
        x = arg(args[0])
        if name == "mean":
            return b.mean(x, dims, keepdim, dtype, pattern="reduction")
        kind = {"sum": "sum", "amax": "max", "amin": "min"}[name]
        return b.reduce(kind, x, dims, keepdim, dtype, pattern="reduction")
    if name in ("max", "min") and overload == "dim":
        keepdim = bool(args[2] if len(args) > 2 else kwargs.get("keepdim", False))
        values = b.reduce(name, arg(args[0]), (int(args[1]),), keepdim, dtype, pattern="reduction")
        return [values, _Unusable(f"the indices of {name}(dim)")]
    if name in ("max", "min") and overload == "other":
        return b.ew("maximum" if name == "max" else "minimum", [arg(args[0]), arg(args[1])], dtype)
    if name in ("var", "std"):
        if overload != "correction":
            raise Unrecognized(f"aten.{name}.{overload}")
        dims = args[1] if len(args) > 1 else kwargs.get("dim")
        if dims is None:
            raise Unrecognized(f"{name} over all dimensions")
        dims = tuple([dims] if isinstance(dims, int) else dims)
        correction = kwargs.get("correction", 1)
        correction = 1.0 if correction is None else float(correction)
        keepdim = bool(kwargs.get("keepdim", False))
        x = arg(args[0])
        full = b.shape(x)
        count = math.prod(full[d % len(full)] for d in dims)
        mu = b.mean(x, dims, True, dtype, pattern="reduction")
        centered = b.ew("sub", [x, mu], dtype)
        sq = b.reduce("sum", b.ew("mul", [centered, centered], dtype), dims, keepdim, dtype, pattern="reduction")
        out = b.ew("mul", [sq, 1.0 / max(count - correction, 1e-30)], dtype)
        return b.ew("sqrt", [out], dtype) if name == "std" else out
    if name == "linalg_vector_norm":
        ord_ = float(args[1]) if len(args) > 1 else float(kwargs.get("ord", 2))
        dims = args[2] if len(args) > 2 else kwargs.get("dim")
        keepdim = bool(args[3] if len(args) > 3 else kwargs.get("keepdim", False))
        if dims is None:
            raise Unrecognized("a norm over all dimensions")
        x = arg(args[0])
        if ord_ == 2:
            s = b.reduce("sum", b.ew("mul", [x, x], dtype), tuple(dims), keepdim, dtype, pattern="norm")
            return b.ew("sqrt", [s], dtype)
        if ord_ == 1:
            return b.reduce("sum", b.ew("abs", [x], dtype), tuple(dims), keepdim, dtype, pattern="norm")
        if ord_ == math.inf:
            return b.reduce("max", b.ew("abs", [x], dtype), tuple(dims), keepdim, dtype, pattern="norm")
        raise Unrecognized(f"a vector norm of order {ord_}")
    if name in ("_softmax", "_log_softmax", "softmax", "log_softmax"):
        x = arg(args[0])
        dim = int(args[1])
        log = "log" in name
        m = b.reduce("max", x, (dim,), True, dtype, pattern="log_softmax" if log else "softmax")
        shifted = b.ew("sub", [x, m], dtype)
        e = b.ew("exp", [shifted], dtype)
        s = b.reduce("sum", e, (dim,), True, dtype)
        if log:
            return b.ew("sub", [shifted, b.ew("log", [s], dtype)], dtype)
        return b.ew("mul", [e, b.ew("reciprocal", [s], dtype)], dtype)
    if name == "logsumexp":
        x = arg(args[0])
        dims = tuple(args[1]) if isinstance(args[1], (list, tuple)) else (int(args[1]),)
        keepdim = bool(args[2] if len(args) > 2 else False)
        m = b.reduce("max", x, dims, True, dtype, pattern="logsumexp")
        s = b.reduce("sum", b.ew("exp", [b.ew("sub", [x, m], dtype)], dtype), dims, keepdim, dtype)
        m_out = m if keepdim else b.reduce("max", x, dims, False, dtype)
        return b.ew("add", [b.ew("log", [s], dtype), m_out], dtype)
    if name == "native_layer_norm":
        x = arg(args[0])
        normalized = list(args[1])
        weight = arg(args[2]) if args[2] is not None else None
        bias = arg(args[3]) if args[3] is not None else None
        eps = float(args[4])
        full = b.shape(x)
        dims = tuple(range(len(full) - len(normalized), len(full)))
        mu = b.mean(x, dims, True, dtype, pattern="layer_norm")
        centered = b.ew("sub", [x, mu], dtype)
        var = b.mean(b.ew("mul", [centered, centered], dtype), dims, True, dtype)
        y = b.ew("mul", [centered, b.ew("rsqrt", [b.ew("add", [var, eps], dtype)], dtype)], dtype)
        if weight is not None:
            y = b.ew("mul", [y, weight], dtype)
        if bias is not None:
            y = b.ew("add", [y, bias], dtype)
        return [y, _Unusable("layer norm's saved mean"), _Unusable("layer norm's saved rstd")]
    # matrix products
    if name in ("mm", "bmm"):
        return b.add("mm", name, [arg(args[0]), arg(args[1])], shape, dtype, pattern="matmul")
    if name in ("addmm", "baddbmm"):
        beta = float(kwargs.get("beta", 1))
        alpha = float(kwargs.get("alpha", 1))
        product = b.add("mm", "mm" if name == "addmm" else "bmm", [arg(args[1]), arg(args[2])], shape, dtype,
                        pattern="linear" if name == "addmm" else "matmul")
        if alpha != 1:
            product = b.ew("mul", [product, alpha], dtype)
        bias = arg(args[0])
        if beta != 1:
            bias = b.ew("mul", [bias, beta], dtype)
        return b.ew("add", [product, bias], dtype)
    raise Unrecognized(f"aten.{name}.{overload} has no built-in template")


class _Unusable:
    def __init__(self, what: str) -> None:
        self.what = what


def torch_node_type():
    import torch

    return torch.fx.Node


# --- which template ----------------------------------------------------------------------------------


def _classify(b: _Builder, out: int, out_glue, out_shape, out_dtype) -> Plan:
    # keep only the nodes the output depends on
    live: set[int] = set()
    stack = [out]
    while stack:
        i = stack.pop()
        if i in live:
            continue
        live.add(i)
        for a in b.nodes[i].args:
            if isinstance(a, _Unusable):
                raise Unrecognized(f"the forward uses {a.what}")
            if isinstance(a, tuple) and a[0] == "node":
                stack.append(a[1])
    remap = {old: new for new, old in enumerate(sorted(live))}
    nodes = []
    for old in sorted(live):
        node = b.nodes[old]
        node.args = [("node", remap[a[1]]) if isinstance(a, tuple) and a[0] == "node" else a for a in node.args]
        nodes.append(node)
    used_leaves = sorted({a[1] for n in nodes for a in n.args if isinstance(a, tuple) and a[0] == "leaf"})
    lmap = {old: new for new, old in enumerate(used_leaves)}
    leaves = [b.leaves[i] for i in used_leaves]
    for node in nodes:
        node.args = [("leaf", lmap[a[1]]) if isinstance(a, tuple) and a[0] == "leaf" else a for a in node.args]
    out = remap[out]
    if nodes[out].dtype not in FLOAT_DTYPES or nodes[out].dtype == "torch.float64":
        raise Unrecognized(f"the output is {nodes[out].dtype}")
    if not any(n.op != "ew" or n.name not in ("view",) for n in nodes):
        raise Unrecognized("forward computes nothing")

    mms = [i for i, n in enumerate(nodes) if n.op == "mm"]
    reductions = [i for i, n in enumerate(nodes) if n.op == "reduce"]
    common = dict(leaves=leaves, nodes=nodes, out=out, out_glue=out_glue, out_shape=out_shape, out_dtype=out_dtype)
    if mms:
        if len(mms) > 1:
            raise Unrecognized(f"{len(mms)} matrix products in one forward")
        if reductions:
            raise Unrecognized("a matrix product followed by a reduction")
        mm = nodes[mms[0]]
        if any(not (isinstance(a, tuple) and a[0] == "leaf") for a in mm.args):
            raise Unrecognized("a matrix product of computed operands (a prologue)")
        downstream = _downstream(nodes, mms[0])
        upstream = [i for i in range(len(nodes)) if i not in downstream and i != mms[0]]
        if upstream:
            raise Unrecognized("elementwise work before the matrix product")
        if len(mm.shape) not in (2, 3):
            raise Unrecognized(f"a {len(mm.shape)}-d matrix product")
        pattern = mm.attrs.get("pattern", "matmul")
        epi = sorted({n.name for i, n in enumerate(nodes) if i in downstream and n.name != "view"})
        return Plan(kind="matmul", summary=f"{pattern} {'x'.join(map(str, mm.shape))}"
                    + (f" + epilogue ({', '.join(epi)})" if epi else ""), **common)
    if reductions:
        full = None
        dims = None
        for i in reductions:
            node = nodes[i]
            x = node.args[0]
            shape = leaves[x[1]].shape if x[0] == "leaf" else nodes[x[1]].shape
            if full is None:
                full, dims = shape, node.attrs["dims"]
            elif shape != full or node.attrs["dims"] != dims:
                raise Unrecognized("reductions over different shapes or dimensions")
        if list(dims) != list(range(dims[0], dims[-1] + 1)):
            raise Unrecognized(f"a reduction over non-adjacent dims {list(dims)}")
        patterns = sorted({n.attrs.get("pattern") for n in nodes if n.attrs.get("pattern")})
        where = "last dim" if dims[-1] == len(full) - 1 and len(dims) == 1 else f"dims {list(dims)}"
        if dims[-1] == len(full) - 1:
            return Plan(kind="rowwise", full_shape=tuple(full), red_dims=tuple(dims),
                        summary=f"{'/'.join(patterns)} over the {where} of {'x'.join(map(str, full))}", **common)
        return Plan(kind="colwise", full_shape=tuple(full), red_dims=tuple(dims),
                    summary=f"{'/'.join(patterns)} over {where} of {'x'.join(map(str, full))}", **common)
    names = sorted({n.name for n in nodes if n.name != "view"})
    return Plan(kind="pointwise", summary=f"elementwise ({', '.join(names)}) on {'x'.join(map(str, out_shape))}",
                **common)


def _downstream(nodes: list[Node], start: int) -> set[int]:
    found = {start}
    for i in range(start + 1, len(nodes)):
        if any(isinstance(a, tuple) and a[0] == "node" and a[1] in found for a in nodes[i].args):
            found.add(i)
    found.discard(start)
    return found


