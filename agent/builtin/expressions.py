"""Elementwise expressions for the kernels: each IR op (agent.builtin.ir, `ew` nodes) as a Triton
expression over float32 operands with a float32 result, and Python scalars as float literals
(or, for a scalar the module holds, the name of the kernel parameter that carries it)."""
from __future__ import annotations

import math
from typing import Any

from agent.builtin.ir import Node, Runtime, Unrecognized


def literal(value: Any) -> str:
    if isinstance(value, Runtime):  # a kernel parameter, never its traced value
        return value.name
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
    if name == "xlogy":  # 0 where x is 0 (unless y is NaN), as torch.xlogy
        return f"tl.where(({x} == 0.0) & ({y} == {y}), 0.0, {x} * tl.log({y}))", []
    if name == "where":
        return f"tl.where({x} != 0.0, {a[1]}, {a[2]})", []
    raise Unrecognized(f"no expression for {name}")
