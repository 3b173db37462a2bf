"""The scalars a draft reads at run time (agent.builtin.variants traces the problem again for them):
every float attribute of the module and its submodules (`self.scale`, `self.norm.eps`), and every
number given to forward (`forward(self, A, s)`, KernelBench's L1 5), changed alone. The IR scalars
that follow it exactly become `Runtime` values: kernel parameters, which forward passes as
`float(self.scale)` or `float(s)`. One whose effect is anything else (it changes the graph, an op's
mode, a derived value), and an int or bool given to forward, is `Fixed`: forward refuses other
values with a ValueError."""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from agent.builtin.ir import Plan, Runtime, Unrecognized

# what tracing the user's module at other sizes may raise (its own checks, torch's, ours): that
# variation is then not followed, and the draft bakes in or checks the value instead
RETRACE_ERRORS = (Exception,)
# ops whose scalar operand may be a kernel parameter (an arithmetic operand, not a mode or exponent)
ARITHMETIC = {"add", "sub", "mul", "div", "maximum", "minimum", "gt", "lt", "ge", "le", "eq", "ne", "where"}


Retrace = Callable[..., Plan]  # (constructor arguments, input shapes[, patch[, input numbers]]) -> the plan traced there
Substitutions = dict[tuple[int, int], Runtime]  # (node, operand) -> the scalar read at run time


@dataclass
class ScalarArg:
    """A scalar passed to the kernel at run time."""

    name: str  # the kernel parameter
    expr: str  # what forward passes for it


@dataclass
class Fixed:
    """An attribute of the module (or a number given to forward) the draft bakes in: forward refuses
    any other value."""

    expr: str  # self.dim
    value: Any


def module_scalars(model, plan: Plan, init: list, shapes: list[tuple[int, ...]], retrace: Retrace
                   ) -> tuple[list[ScalarArg], list[Fixed], Substitutions]:
    """The module's float attributes: each a kernel parameter, fixed, or (reaching no kernel
    operand) neither."""
    scalars: list[ScalarArg] = []
    fixed: list[Fixed] = []
    substitutions: Substitutions = {}
    for prefix, sub in model.named_modules():
        for name, value in list(vars(sub).items()):
            if name.startswith("_") or type(value) is not float:
                continue

            def patched(varied: float, prefix=prefix, name=name) -> Plan:
                return retrace(init, shapes, setting(prefix, name, varied))

            expr = attr_expr(f"{prefix}.{name}" if prefix else name)
            found = _follow(plan, value, patched)
            if found is None:
                fixed.append(Fixed(expr, value))
            elif found:
                _pass(scalars, substitutions, expr, value, found)
    return scalars, fixed, substitutions


def input_numbers(numbers: dict[int, Any], names: list[str], plan: Plan, init: list, shapes: list[tuple[int, ...]],
                  retrace: Retrace, scalars: list[ScalarArg], fixed: list[Fixed], substitutions: Substitutions) -> None:
    """The numbers given to forward, as the module's float attributes are: a float the IR follows
    exactly is passed to the kernel at run time (`float(s)`); any other number (an int, a bool, a
    float that changes the graph) is fixed, and forward refuses other values."""
    for i, value in numbers.items():
        found = _follow(plan, value, lambda varied, i=i: retrace(init, shapes, None, {i: varied})) \
            if type(value) is float else None
        if found:
            _pass(scalars, substitutions, names[i], value, found)
        else:  # None: structural; []: it reaches no kernel operand (it is checked all the same)
            fixed.append(Fixed(names[i], value))


def _follow(plan: Plan, value: float, traced_with: Callable[[float], Plan]) -> list[tuple[int, int]] | None:
    """Where the scalar `value` sits in the plan, from the problem traced with another value
    (`traced_with(varied)`); None when another value changes anything else, or does not trace (it
    is structural)."""
    varied = value * 0.75 if value != 0 else 0.5
    try:
        return _followed(plan, traced_with(varied), value, varied)
    except RETRACE_ERRORS:
        return None


def submodule_ints(model, plan: Plan, traced: set[int], patched: Callable[[Callable[[Any], None]], Plan]) -> list[Fixed]:
    """A submodule's int settings (or tuples of them) that the fallback's torch calls read and no
    traced size class follows, such as GroupNorm's num_groups: forward refuses other values (a
    GroupNorm of 3 groups built with 1 gave wrong outputs, not a refusal). One the traced graph does
    not read (a Linear's out_features: its weight's shape, which forward checks, says the same) is
    not baked: the problem traced with it changed alone (`patched(patch)`) is the same plan. A
    setting that does not trace changed alone is baked."""
    out = []
    for prefix, sub in model.named_modules():
        if not prefix:
            continue
        for name, value in sorted(vars(sub).items()):
            items = value if isinstance(value, tuple) else (value,)
            if name.startswith("_") or not items or not all(type(v) is int for v in items):
                continue
            if all(v <= 1 for v in items) or any(v in traced for v in items):
                continue
            varied = tuple(v + 1 for v in items) if isinstance(value, tuple) else value + 1
            try:
                unread = _same(plan, patched(setting(prefix, name, varied)))
            except RETRACE_ERRORS:
                unread = False
            if not unread:
                out.append(Fixed(attr_expr(f"{prefix}.{name}"), value))
    return out


def setting(prefix: str, name: str, value: Any) -> Callable[[Any], None]:
    """A patch for a retrace: the submodule at `prefix` (the module itself for "") given `name` = `value`."""
    def patch(other: Any) -> None:
        setattr(other.get_submodule(prefix), name, value)
    return patch


def _same(a: Plan, b: Plan) -> bool:
    """The same plan: its skeleton and every scalar operand."""
    return _skeleton(a) == _skeleton(b) and all(
        x.args == y.args for x, y in zip(a.nodes, b.nodes))


def _pass(scalars: list[ScalarArg], substitutions: Substitutions, expr: str, value: float,
          found: list[tuple[int, int]]) -> None:
    """`expr` becomes the next kernel parameter, at every position it was `found`."""
    arg = ScalarArg(f"scalar_{len(scalars)}", f"float({expr})")
    scalars.append(arg)
    substitutions.update({position: Runtime(value, arg.name) for position in found})


def _skeleton(plan: Plan) -> tuple:
    """Everything of a plan but its nodes' scalar operands."""
    leaves = [(l.kind, l.ref, repr(l.glue), l.shape, l.strides, l.dtype) for l in plan.leaves]
    nodes = [(n.op, n.name, n.shape, n.dtype, repr(n.attrs), [a if isinstance(a, tuple) else type(a) for a in n.args])
             for n in plan.nodes]
    return (plan.kind, leaves, nodes, plan.out, repr(plan.out_glue), plan.out_shape, plan.out_dtype, plan.full_shape,
            plan.red_dims)


def _followed(base: Plan, other: Plan, value: float, varied: float) -> list[tuple[int, int]] | None:
    """The (node, operand) positions whose scalar is the attribute itself, or None when the
    attribute changes anything else."""
    if _skeleton(base) != _skeleton(other):
        return None
    found = []
    for i, (a, b) in enumerate(zip(base.nodes, other.nodes)):
        for j, (x, y) in enumerate(zip(a.args, b.args)):
            if isinstance(x, tuple) or x == y:
                continue
            arithmetic = a.name in ARITHMETIC or (a.op == "aten" and type(x) is float)  # the fallback's torch calls
            if arithmetic and not isinstance(x, bool) and x == value and y == varied:
                found.append((i, j))
            else:
                return None
    return found


def substitute(plan: Plan, substitutions: Substitutions) -> Plan:
    """The plan with each substituted operand a `Runtime` scalar (in place)."""
    for (i, j), scalar in substitutions.items():
        if i >= len(plan.nodes) or j >= len(plan.nodes[i].args) or isinstance(plan.nodes[i].args[j], tuple) \
                or plan.nodes[i].args[j] != float(scalar):
            raise Unrecognized(f"the module's scalar {scalar.name} is no longer where it was")
        plan.nodes[i].args[j] = scalar
    return plan


def attr_expr(dotted: str) -> str:
    """`self.norm.eps`, `self.layers[0].scale`: a module attribute as forward reads it."""
    expr = "self"
    for part in dotted.split("."):
        expr += f"[{part}]" if part.isdigit() else f".{part}"
    return expr
