"""Drafting: from a recognized plan (agent.builtin.recognize) and a kernel configuration
(agent.builtin.search) to a candidate module, rendered from the Jinja templates in kernels/.

The templates hold each kernel's structure (program ids, tiles, masks, loops, the K loop and
GROUP_M swizzle of the matrix product, the launch). This module fills in what is specific to the
problem: the elementwise expressions of the fused prologue/epilogue, the loads of each operand
with its broadcast index, the reductions, and the glue replayed in torch before the launch.

Every value is computed in float32 in registers; loads convert to float32 and the one store
converts to the output's dtype. A value is generated for a *target shape*: the shape of the op
that consumes it, so a broadcast operand (a bias of shape [N], a per-row scale [M, 1], a scalar
tensor) is loaded with the index of the consumer's element, exactly as torch broadcasts it.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

import jinja2

from agent.builtin.recognize import Leaf, Node, Plan, Problem, Unrecognized

KERNELS_DIR = Path(__file__).parent / "kernels"
INT32_LIMIT = 2**31 - 1
FEW_ROWS, LONG_ROW = 64, 32768  # rowwise: fewer rows than this, each at least this long, is declined


@lru_cache(maxsize=1)
def _environment() -> jinja2.Environment:
    return jinja2.Environment(loader=jinja2.FileSystemLoader(str(KERNELS_DIR)), undefined=jinja2.StrictUndefined,
                              trim_blocks=True, lstrip_blocks=True, keep_trailing_newline=True, autoescape=False)


def render(template: str, **variables: Any) -> str:
    return _environment().get_template(template).render(template_name=f"kernels/{template}", **variables)


# --- elementwise expressions (float32 operands, float32 result) ----------------------------------------


def literal(value: Any) -> str:
    if isinstance(value, bool):
        return "1.0" if value else "0.0"
    value = float(value)
    if math.isnan(value):
        return 'float("nan")'
    if math.isinf(value):
        return 'float("inf")' if value > 0 else '(-float("inf"))'
    return repr(value)


def _tanh(x: str) -> str:
    return f"(2.0 * tl.sigmoid(2.0 * {x}) - 1.0)"


def _softplus(x: str, beta: float = 1.0, threshold: float = 20.0) -> str:
    scaled = x if beta == 1.0 else f"({x} * {literal(beta)})"
    soft = f"tl.log(1.0 + tl.exp({scaled}))" if beta == 1.0 else f"(tl.log(1.0 + tl.exp({scaled})) / {literal(beta)})"
    return f"tl.where({scaled} > {literal(threshold)}, {x}, {soft})"


def expression(node: Node, a: list[str]) -> tuple[str, list[str]]:
    """The Triton expression of an elementwise node over operand expressions `a` (names or
    literals), and any statements it needs first (as (name, expr) pairs are avoided: operands are
    always names or literals, so repeating one in an expression costs nothing)."""
    name, attrs = node.name, node.attrs
    x = a[0]
    unary = {
        "relu": f"tl.maximum({x}, 0.0)", "sigmoid": f"tl.sigmoid({x})", "tanh": _tanh(x),
        "exp": f"tl.exp({x})", "log": f"tl.log({x})", "sqrt": f"tl.sqrt({x})", "rsqrt": f"tl.rsqrt({x})",
        "abs": f"tl.abs({x})", "neg": f"(-{x})", "reciprocal": f"(1.0 / {x})", "silu": f"({x} * tl.sigmoid({x}))",
        "erf": f"tl.erf({x})", "sin": f"tl.sin({x})", "cos": f"tl.cos({x})", "floor": f"tl.floor({x})",
        "ceil": f"tl.ceil({x})", "square": f"({x} * {x})", "exp2": f"tl.exp2({x})", "log2": f"tl.log2({x})",
        "log1p": f"tl.log(1.0 + {x})", "expm1": f"(tl.exp({x}) - 1.0)",
        "hardswish": f"({x} * tl.minimum(tl.maximum({x} + 3.0, 0.0), 6.0) * 0.16666666666666666)",
        "hardsigmoid": f"tl.minimum(tl.maximum({x} * 0.16666666666666666 + 0.5, 0.0), 1.0)",
        "relu6": f"tl.minimum(tl.maximum({x}, 0.0), 6.0)",
        "selu": f"(1.0507009873554805 * tl.where({x} > 0.0, {x}, 1.6732632423543772 * (tl.exp({x}) - 1.0)))",
        "sign": f"tl.where({x} > 0.0, 1.0, tl.where({x} < 0.0, -1.0, 0.0))",
        "logsigmoid": f"(tl.minimum({x}, 0.0) - tl.log(1.0 + tl.exp(-tl.abs({x}))))",
        "mish": f"({x} * {_tanh(_softplus(x))})",
        "cast": x, "view": x, "expand": x,
    }
    if name in unary:
        return unary[name], []
    if name == "leaky_relu":
        return f"tl.where({x} > 0.0, {x}, {x} * {literal(attrs['slope'])})", []
    if name == "elu":
        scale, alpha, iscale = attrs["scale"], attrs["alpha"], attrs["input_scale"]
        pos = x if scale == 1.0 else f"{x} * {literal(scale)}"
        arg = x if iscale == 1.0 else f"{x} * {literal(iscale)}"
        return f"tl.where({x} > 0.0, {pos}, {literal(scale * alpha)} * (tl.exp({arg}) - 1.0))", []
    if name == "gelu":
        if attrs.get("approximate", "none") == "tanh":
            inner = f"0.7978845608028654 * ({x} + 0.044715 * {x} * {x} * {x})"
            return f"(0.5 * {x} * (1.0 + {_tanh('(' + inner + ')')}))", []
        return f"(0.5 * {x} * (1.0 + tl.erf({x} * 0.7071067811865476)))", []
    if name == "softplus":
        return _softplus(x, attrs["beta"], attrs["threshold"]), []
    if name == "pow":
        p = float(a[1])
        if p == 0:
            return f"({x} * 0.0 + 1.0)", []
        if p == 0.5:
            return f"tl.sqrt({x})", []
        if p == -0.5:
            return f"tl.rsqrt({x})", []
        product = " * ".join([x] * int(abs(p)))
        return (f"({product})" if p > 0 else f"(1.0 / ({product}))"), []
    y = a[1] if len(a) > 1 else None
    binary = {"add": f"({x} + {y})", "sub": f"({x} - {y})", "mul": f"({x} * {y})", "div": f"({x} / {y})",
              "maximum": f"tl.maximum({x}, {y})", "minimum": f"tl.minimum({x}, {y})"}
    if name in binary:
        return binary[name], []
    compare = {"gt": ">", "lt": "<", "ge": ">=", "le": "<=", "eq": "==", "ne": "!="}
    if name in compare:
        return f"tl.where({x} {compare[name]} {y}, 1.0, 0.0)", []
    if name == "where":
        return f"tl.where({x} != 0.0, {a[1]}, {a[2]})", []
    raise Unrecognized(f"no expression for {name}")


# --- index spaces ----------------------------------------------------------------------------------------


@dataclass
class Group:
    """A run of dims flattened into one index: `var` (a vector, or a scalar program id), its
    bounds mask (None: always in bounds), and how it broadcasts in the tile ("[:, None]")."""

    size: int
    var: str
    mask: str | None
    suffix: str


def split_dims(shape: tuple[int, ...], sizes: list[int]) -> list[list[int]]:
    """Partition the dims of `shape`, in order, into runs whose products are `sizes`."""
    groups: list[list[int]] = [[] for _ in sizes]
    g, product = 0, 1
    for d, s in enumerate(shape):
        while g < len(sizes) - 1 and product == sizes[g] and s != 1:
            g, product = g + 1, 1
        groups[g].append(d)
        product *= s
        if product > sizes[g]:
            raise Unrecognized(f"shape {list(shape)} does not split into {sizes}")
    # the remaining groups must be complete (size 1 when empty)
    for i, dims in enumerate(groups):
        if math.prod(shape[d] for d in dims) != sizes[i]:
            raise Unrecognized(f"shape {list(shape)} does not split into {sizes}")
    return groups


def expanded_strides(shape: tuple[int, ...], strides: tuple[int, ...], target: tuple[int, ...]) -> list[int]:
    """The strides of a tensor broadcast (right-aligned) to `target`: 0 along broadcast dims."""
    pad = len(target) - len(shape)
    if pad < 0:
        raise Unrecognized(f"shape {list(shape)} does not broadcast to {list(target)}")
    out = []
    for d, size in enumerate(target):
        if d < pad:
            out.append(0)
            continue
        s = shape[d - pad]
        if s == size:
            out.append(strides[d - pad] if size != 1 else 0)
        elif s == 1:
            out.append(0)
        else:
            raise Unrecognized(f"shape {list(shape)} does not broadcast to {list(target)}")
    return out


def group_offset(var: str, sizes: list[int], strides: list[int]) -> str | None:
    """The offset of an element along a run of dims flattened into `var`, or None when it is 0."""
    dims = [(s, t) for s, t in zip(sizes, strides) if s != 1]
    merged: list[list[int]] = []
    for s, t in dims:
        if merged and merged[-1][1] == t * s:
            merged[-1] = [merged[-1][0] * s, t]
        else:
            merged.append([s, t])
    terms = []
    inner = 1
    for i in range(len(merged) - 1, -1, -1):
        s, t = merged[i]
        if t != 0:
            index = var if inner == 1 else f"({var} // {inner})"
            if i > 0:
                index = f"({index} % {s})"
            terms.append(index if t == 1 else f"{index} * {t}")
        inner *= s
    if not terms:
        return None
    return " + ".join(reversed(terms))


# --- the emitter ----------------------------------------------------------------------------------------


class Emitter:
    """Generates the statements of one kernel for a plan. `spaces` maps a value kind ("full":
    elements of the full tile, "row": reduced values) to its index groups; `reduce_group` is the
    group of "full" that reductions run over."""

    def __init__(self, plan: Plan, spaces: dict[str, list[Group]], *, reduce_group: int | None = None,
                 looped: bool = False, loop: dict[str, Any] | None = None, acc: str | None = None) -> None:
        self.plan = plan
        self.spaces = spaces
        self.reduce_group = reduce_group
        self.looped = looped
        self.loop = loop or {}
        self.acc = acc  # the matrix product's accumulator name
        self.outer: list[str] = []
        self.body: list[str] = self.outer
        self.full_memo: dict[Any, tuple[str, frozenset[int]]] = {}
        self.row_memo: dict[Any, tuple[str, frozenset[int]]] = {}
        self.counter = 0
        self.loads = 0

    def fresh(self, prefix: str = "v") -> str:
        self.counter += 1
        return f"{prefix}{self.counter}"

    def shape(self, ref) -> tuple[int, ...]:
        if not isinstance(ref, tuple):
            return ()
        return self.plan.leaves[ref[1]].shape if ref[0] == "leaf" else self.plan.nodes[ref[1]].shape

    def _emit(self, kind: str, line: str) -> None:
        (self.body if kind == "full" else self.outer).append(line)

    def gen(self, ref, kind: str, target: tuple[int, ...]) -> tuple[str, frozenset[int]]:
        """A name (or literal) holding `ref` for elements of `target` (a shape it broadcasts to)."""
        if not isinstance(ref, tuple):
            return literal(ref), frozenset()
        memo = self.full_memo if kind == "full" else self.row_memo
        key = (ref, target)
        if key in memo:
            return memo[key]
        if ref[0] == "leaf":
            result = self._load(self.plan.leaves[ref[1]], kind, target)
        else:
            result = self._node(self.plan.nodes[ref[1]], ref[1], kind, target)
        memo[key] = result
        return result

    def _groups(self, kind: str, target: tuple[int, ...]) -> tuple[list[Group], list[list[int]]]:
        groups = self.spaces[kind]
        return groups, split_dims(target, [g.size for g in groups])

    def _load(self, leaf: Leaf, kind: str, target: tuple[int, ...]) -> tuple[str, frozenset[int]]:
        groups, dims = self._groups(kind, target)
        strides = expanded_strides(leaf.shape, leaf.strides, target)
        parts, masks, present = [], [], set()
        for i, (group, ds) in enumerate(zip(groups, dims)):
            offset = group_offset(group.var, [target[d] for d in ds], [strides[d] for d in ds])
            if offset is None:
                continue
            present.add(i)
            simple = offset.replace("_", "").isalnum()
            parts.append((offset if simple else f"({offset})") + group.suffix if group.suffix else offset)
            if group.mask:
                masks.append(f"{group.mask}{group.suffix}")
        ptr = f"in{self.plan.leaves.index(leaf)}_ptr"
        name = self.fresh()
        self.loads += 1
        if not parts:
            self._emit(kind, f"{name} = tl.load({ptr}).to(tl.float32)")
        else:
            mask = " & ".join(masks)
            mask_arg = f", mask={mask}, other=0.0" if mask else ""
            self._emit(kind, f"{name} = tl.load({ptr} + {' + '.join(parts)}{mask_arg}).to(tl.float32)")
        return name, frozenset(present)

    def _aligned(self, shape: tuple[int, ...], target: tuple[int, ...]) -> tuple[int, ...]:
        if len(shape) > len(target):
            raise Unrecognized(f"shape {list(shape)} does not broadcast to {list(target)}")
        return (1,) * (len(target) - len(shape)) + tuple(shape)

    def _node(self, node: Node, index: int, kind: str, target: tuple[int, ...]) -> tuple[str, frozenset[int]]:
        if node.op == "mm":
            if kind != "full" or self._aligned(node.shape, target) != target or self.acc is None:
                raise Unrecognized("the matrix product's result is broadcast")
            return self.acc, frozenset(range(len(self.spaces["full"])))
        if node.op == "reduce":
            return self._reduced(node, index, kind, target)
        if node.name == "view":
            if self._aligned(node.shape, target) != target:
                raise Unrecognized("a reshaped value is broadcast")
            source = node.args[0]
            return self.gen(source, kind, self.shape(source))
        if _broadcast_ok(node.shape, target) is False:
            raise Unrecognized(f"shape {list(node.shape)} does not broadcast to {list(target)}")
        operands = [self.gen(a, kind, target) for a in node.args]
        text, _ = expression(node, [o[0] for o in operands])
        present = frozenset().union(*[o[1] for o in operands]) if operands else frozenset()
        if not present and all(not isinstance(a, tuple) for a in node.args):
            return text, present
        name = self.fresh()
        self._emit(kind, f"{name} = {text}")
        return name, present

    def _reduced(self, node: Node, index: int, kind: str, target: tuple[int, ...]) -> tuple[str, frozenset[int]]:
        """A reduction's result: computed once per program (a loop over the reduced dims)."""
        if self.reduce_group is None:
            raise Unrecognized("a reduction in a kernel without one")
        full_groups = self.spaces["full"]
        aligned = self._aligned(node.shape, target)
        if kind == "full":
            groups, dims = self._groups("full", target)
            for i, ds in enumerate(dims):
                want = [1] * len(ds) if i == self.reduce_group else [target[d] for d in ds]
                if [aligned[d] for d in ds] != want:
                    raise Unrecognized("a reduced value broadcast along other dims than it was reduced over")
        elif aligned != target:
            raise Unrecognized("a reduced value broadcast")
        row_groups = frozenset(i for i in range(len(full_groups)) if i != self.reduce_group) if kind == "full" \
            else frozenset(range(len(self.spaces["row"])))
        key = ("reduced", index)
        if key in self.row_memo:
            return self.row_memo[key][0], row_groups
        # the reduction's input, over the full tile
        source = node.args[0]
        full = tuple(self.plan.full_shape)
        combine = {"sum": ("tl.sum", "0.0", "{a} + {v}"), "max": ("tl.max", '(-float("inf"))', "tl.maximum({a}, {v})"),
                   "min": ("tl.min", 'float("inf")', "tl.minimum({a}, {v})")}[node.name]
        axis = 1 if self.reduce_group == len(full_groups) - 1 and len(full_groups) == 2 else 0
        keep = "[:, None]" if axis == 1 else "[None, :]"
        result = self.fresh("r")
        everything = frozenset(range(len(full_groups)))
        if not self.looped:
            value, present = self.gen(source, "full", full)
            masked = self.fresh()
            tile_mask = self.loop["mask"]
            if present != everything:
                value = f"tl.broadcast_to({value}, {self.loop['tile']})"
            self.body.append(f"{masked} = tl.where({tile_mask}, {value}, {combine[1]})")
            self.body.append(f"{result} = {combine[0]}({masked}, axis={axis}){keep}")
        elif self._partner(node, index) is not None:
            s_index, m_index = self._partner(node, index)
            self._online_sum_exp(s_index, m_index, axis, keep, everything)
            return self.row_memo[key][0], row_groups
        else:
            saved_body, saved_memo = self.body, self.full_memo
            self.body, self.full_memo = [], {}
            value, present = self.gen(source, "full", full)
            if present != everything:
                value = f"tl.broadcast_to({value}, {self.loop['tile']})"
            acc = self.fresh("acc")
            body = self.body
            self.body, self.full_memo = saved_body, saved_memo
            self.outer.append(f"{acc} = tl.full({self.loop['tile']}, {combine[1]}, tl.float32)")
            self.outer.append(self.loop["header"])
            self.outer.extend("    " + line for line in self.loop["setup"])
            self.outer.extend("    " + line for line in body)
            self.outer.append("    " + f"{acc} = " + combine[2].format(
                a=acc, v=f"tl.where({self.loop['mask']}, {value}, {combine[1]})"))
            self.outer.append(f"{result} = {combine[0]}({acc}, axis={axis}){keep}")
        self.row_memo[key] = (result, row_groups)
        return result, row_groups


    def _online(self, node: Node) -> tuple[Any, int] | None:
        """(g, index of M) when `node` is sum(exp(g - M)) with M = max(g) over the same dims, kept
        dims (softmax, log-softmax, logsumexp): then both come from one loop (online softmax)."""
        nodes = self.plan.nodes
        e = node.args[0]
        if node.name != "sum" or not (isinstance(e, tuple) and e[0] == "node") or nodes[e[1]].name != "exp":
            return None
        d = nodes[e[1]].args[0]
        if not (isinstance(d, tuple) and d[0] == "node") or nodes[d[1]].name != "sub":
            return None
        g, m = nodes[d[1]].args
        if not (isinstance(m, tuple) and m[0] == "node"):
            return None
        mx = nodes[m[1]]
        if mx.op != "reduce" or mx.name != "max" or mx.args[0] != g or mx.attrs["dims"] != node.attrs["dims"] \
                or not mx.attrs["keepdim"] or self.shape(g) != tuple(self.plan.full_shape):
            return None
        return g, m[1]

    def _partner(self, node: Node, index: int) -> tuple[int, int] | None:
        """(S, M) indices when `node` is either of an online pair neither of which is computed yet."""
        for i, other in enumerate(self.plan.nodes):
            if other.op != "reduce":
                continue
            found = self._online(other)
            if found is not None and index in (i, found[1]) and ("reduced", i) not in self.row_memo \
                    and ("reduced", found[1]) not in self.row_memo:
                return i, found[1]
        return None

    def _online_sum_exp(self, s_index: int, m_index: int, axis: int, keep: str, everything: frozenset[int]) -> None:
        """One loop for M = max(g) and S = sum(exp(g - M)): running per-lane maxima, the partial
        sums rescaled whenever a lane's maximum grows; lanes that saw nothing stay 0."""
        g, _ = self._online(self.plan.nodes[s_index])
        result = self.fresh("r")
        full = tuple(self.plan.full_shape)
        saved_body, saved_memo = self.body, self.full_memo
        self.body, self.full_memo = [], {}
        value, present = self.gen(g, "full", full)
        if present != everything:
            value = f"tl.broadcast_to({value}, {self.loop['tile']})"
        body = self.body
        self.body, self.full_memo = saved_body, saved_memo
        m_acc, s_acc, m_row = self.fresh("macc"), self.fresh("sacc"), self.fresh("r")
        v, m_new, m_safe = self.fresh(), self.fresh(), self.fresh()
        inf = 'float("inf")'
        reduce_max, reduce_sum = ("tl.max", "tl.sum")
        self.outer.append(f"{m_acc} = tl.full({self.loop['tile']}, -{inf}, tl.float32)")
        self.outer.append(f"{s_acc} = tl.full({self.loop['tile']}, 0.0, tl.float32)")
        self.outer.append(self.loop["header"])
        self.outer.extend("    " + line for line in self.loop["setup"])
        self.outer.extend("    " + line for line in body)
        self.outer += ["    " + line for line in (
            f"{v} = tl.where({self.loop['mask']}, {value}, -{inf})",
            f"{m_new} = tl.maximum({m_acc}, {v})",
            f"{m_safe} = tl.where({m_new} == -{inf}, 0.0, {m_new})",
            f"{s_acc} = {s_acc} * tl.exp({m_acc} - {m_safe}) + tl.exp({v} - {m_safe})",
            f"{m_acc} = {m_new}")]
        m_row_safe = self.fresh()
        self.outer.append(f"{m_row} = {reduce_max}({m_acc}, axis={axis}){keep}")
        self.outer.append(f"{m_row_safe} = tl.where({m_row} == -{inf}, 0.0, {m_row})")
        self.outer.append(f"{result} = {reduce_sum}({s_acc} * tl.exp({m_acc} - {m_row_safe}), axis={axis}){keep}")
        self.row_memo[("reduced", m_index)] = (m_row, frozenset())
        self.row_memo[("reduced", s_index)] = (result, frozenset())


def _broadcast_ok(shape: tuple[int, ...], target: tuple[int, ...]) -> bool:
    if len(shape) > len(target):
        return False
    pad = len(target) - len(shape)
    return all(s in (1, target[pad + i]) for i, s in enumerate(shape))


# --- the module --------------------------------------------------------------------------------------


def glue_expr(var: str, glue: list[tuple[str, list[Any]]]) -> str:
    expr = var
    for op, args in glue:
        if op in ("view", "_unsafe_view", "reshape"):
            expr += f".reshape({tuple(int(s) for s in args[0])})"
        elif op == "t":
            expr += ".t()"
        elif op == "transpose":
            expr += f".transpose({int(args[0])}, {int(args[1])})"
        elif op == "permute":
            expr += f".permute({tuple(int(s) for s in args[0])})"
        elif op == "expand":
            expr += f".expand({tuple(int(s) for s in args[0])})"
        elif op == "unsqueeze":
            expr += f".unsqueeze({int(args[0])})"
        elif op == "squeeze":
            if not args:
                expr += ".squeeze()"
            elif isinstance(args[0], list):
                expr += f".squeeze({tuple(int(s) for s in args[0])})"
            else:
                expr += f".squeeze({int(args[0])})"
        elif op in ("clone", "contiguous", "lift_fresh_copy"):
            expr += ".contiguous()"
        elif op == "_to_copy":
            expr += f".to({args[0]})"
        elif op in ("alias", "detach"):
            pass
        else:
            raise Unrecognized(f"glue op {op}")
    return expr


def leaf_sources(plan: Plan, problem: Problem) -> list[str]:
    out = []
    for leaf in plan.leaves:
        base = problem.input_names[leaf.ref] if leaf.kind == "input" else problem.param_exprs[leaf.ref]
        out.append(glue_expr(base, leaf.glue))
    return out


def _numel_limit(plan: Plan) -> bool:
    """Whether offsets may pass int32 (then the kernels index in int64)."""
    sizes = [math.prod(l.shape) for l in plan.leaves] + [math.prod(plan.out_shape)]
    spans = [sum((s - 1) * abs(t) for s, t in zip(l.shape, l.strides)) for l in plan.leaves]
    return max(sizes + spans) > INT32_LIMIT - 65536


def draft(plan: Plan, problem: Problem, config: dict[str, Any]) -> str:
    """The candidate module for a plan and a configuration."""
    maker = {"pointwise": _pointwise, "rowwise": _rowwise, "colwise": _colwise, "matmul": _matmul}[plan.kind]
    return maker(plan, problem, config)


def _common(plan: Plan, problem: Problem, config: dict[str, Any]) -> dict[str, Any]:
    out_node = plan.nodes[plan.out]
    return dict(
        problem_name=problem.path.name, summary=plan.summary, prelude=problem.prelude,
        init_source=problem.init_source.rstrip("\n"), forward_params=problem.forward_params,
        leaves=[{"ptr": f"in{i}_ptr", "var": f"in{i}", "source": src} for i, src in enumerate(leaf_sources(plan, problem))],
        out_alloc=tuple(out_node.shape), out_dtype=plan.out_dtype,
        out_glue=glue_expr("out", plan.out_glue) if plan.out_glue else "out",
        config=config, config_text=", ".join(f"{k}={v}" for k, v in config.items()), i64=_numel_limit(plan),
    )


def _store_value(value: str, present: frozenset[int], everything: int, tile: str) -> str:
    return value if len(present) == everything else f"tl.broadcast_to({value}, {tile})"


def _pointwise(plan: Plan, problem: Problem, config: dict[str, Any]) -> str:
    out = plan.nodes[plan.out]
    total = math.prod(out.shape)
    spaces = {"full": [Group(total, "offs", "mask", "")]}
    em = Emitter(plan, spaces)
    value, present = em.gen(("node", plan.out), "full", tuple(out.shape))
    value = _store_value(value, present, 1, "[BLOCK]")
    return render("pointwise.py.j2", body=em.outer, result=value, numel=total, **_common(plan, problem, config))


def _rowwise(plan: Plan, problem: Problem, config: dict[str, Any]) -> str:
    full = tuple(plan.full_shape)
    d0 = plan.red_dims[0]
    rows, width = math.prod(full[:d0]), math.prod(full[d0:])
    looped = bool(config["looped"])
    if rows < FEW_ROWS and width >= LONG_ROW:
        # one program per row would leave most of the GPU idle: that needs a split reduction
        raise Unrecognized(f"{rows} rows of {width} elements (a split reduction across programs is not implemented)")
    spaces = {"full": [Group(rows, "rows", "rmask", "[:, None]"), Group(width, "cols", "cmask", "[None, :]")],
              "row": [Group(rows, "rows", "rmask", "[:, None]")]}
    loop = {"tile": "[BLOCK_M, BLOCK_R]", "mask": "mask", "header": f"for r0 in range(0, {width}, BLOCK_R):",
            "setup": ["cols = r0 + tl.arange(0, BLOCK_R)", f"cmask = cols < {width}",
                      "mask = rmask[:, None] & cmask[None, :]"]}
    em = Emitter(plan, spaces, reduce_group=1, looped=looped, loop=loop)
    out = plan.nodes[plan.out]
    out_full = math.prod(out.shape) == rows * width
    final: list[str] = []
    if out_full:
        if looped:
            saved = em.body
            em.body, em.full_memo = [], {}
            value, present = em.gen(("node", plan.out), "full", tuple(out.shape))
            final = em.body + [f"tl.store(out_ptr + rows{ '[:, None]' } * {width} + cols[None, :], "
                               f"{_store_value(value, present, 2, '[BLOCK_M, BLOCK_R]')}"
                               f".to(out_ptr.dtype.element_ty), mask=mask)"]
            em.body = saved
        else:
            value, present = em.gen(("node", plan.out), "full", tuple(out.shape))
            em.outer.append(f"tl.store(out_ptr + rows[:, None] * {width} + cols[None, :], "
                            f"{_store_value(value, present, 2, '[BLOCK_M, BLOCK_R]')}.to(out_ptr.dtype.element_ty), "
                            f"mask=mask)")
    else:
        if math.prod(out.shape) != rows:
            raise Unrecognized(f"an output of {math.prod(out.shape)} elements from rows of {rows} x {width}")
        value, present = em.gen(("node", plan.out), "row", tuple(out.shape))
        em.outer.append(f"tl.store(out_ptr + rows[:, None], {_store_value(value, present, 1, '[BLOCK_M, 1]')}"
                        f".to(out_ptr.dtype.element_ty), mask=rmask[:, None])")
    return render("rowwise.py.j2", body=em.outer, final=final, looped=looped, out_full=out_full, rows=rows,
                  width=width, **_common(plan, problem, config))


def _colwise(plan: Plan, problem: Problem, config: dict[str, Any]) -> str:
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
                           f"{_store_value(value, present, 3, '[BLOCK_R, BLOCK_N]')}.to(out_ptr.dtype.element_ty), "
                           f"mask=mask)"]
        em.body = saved
    elif math.prod(out.shape) == outer * inner:
        value, present = em.gen(("node", plan.out), "row", tuple(out.shape))
        em.outer.append(f"tl.store(out_ptr + pid_m * {inner} + n_idx[None, :], "
                        f"{_store_value(value, present, 2, '[1, BLOCK_N]')}.to(out_ptr.dtype.element_ty), "
                        f"mask=n_mask[None, :])")
    else:
        raise Unrecognized(f"an output of {math.prod(out.shape)} elements from a reduction of {list(full)}")
    return render("colwise.py.j2", body=em.outer, final=final, out_full=out_full, outer=outer, red=red, inner=inner,
                  **_common(plan, problem, config))


def _matmul(plan: Plan, problem: Problem, config: dict[str, Any]) -> str:
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
    value = _store_value(value, present, 2, "[BLOCK_M, BLOCK_N]")
    a_idx, b_idx = mm.args[0][1], mm.args[1][1]
    precision = config.get("precision", "ieee")
    if a.dtype != "torch.float32":
        precision = None
    return render("matmul.py.j2", body=em.outer, result=value, batched=batched, batch=batch, m=m, n=n, k=k,
                  a_index=a_idx, b_index=b_idx, a_strides=a.strides, b_strides=b.strides, precision=precision,
                  even_k=(k % config["BLOCK_K"] == 0), **_common(plan, problem, config))
