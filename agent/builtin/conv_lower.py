"""Lowering aten.convolution to the IR (agent.builtin.aten hands it over): one `conv` node over the
input and weight leaves, with the traced stride, padding, dilation and groups as attributes, and
the bias (when there is one) as an elementwise add of the bias leaf seen as [C_out, 1, (1)], so it
joins the epilogue the kernel computes after the implicit GEMM (agent.builtin.conv).

Forward and transposed convolutions over 1, 2 or 3 spatial dims; a transposed one's weight is
[C_in, C_out/groups, K...] and its output channels are the output's dim 1, so the bias broadcasts
over v.shape[1].
"""
from __future__ import annotations

import dataclasses
from typing import Any

from agent.builtin.builder import Builder
from agent.builtin.ir import Unrecognized

CONV_OPS = {"convolution", "_convolution"}


def lower_conv(b: Builder, args, kwargs: dict[str, Any], arg, dtype: str, v) -> Any:
    """The IR of aten.convolution(x, w, bias, stride, padding, dilation, transposed, output_padding, groups)."""
    names = ("input", "weight", "bias", "stride", "padding", "dilation", "transposed", "output_padding", "groups")
    given = {name: args[i] if len(args) > i else kwargs.get(name) for i, name in enumerate(names)}
    weight_shape = tuple(given["weight"].meta["val"].shape)
    n = len(weight_shape) - 2
    transposed = bool(given["transposed"])
    if n not in (1, 2, 3):
        raise Unrecognized(f"a {n}-d convolution")
    x_shape = tuple(given["input"].meta["val"].shape)
    if len(x_shape) != n + 2:
        raise Unrecognized(f"an unbatched {n}-d convolution (input of {len(x_shape)} dims)")
    attrs = dict(dims=n, stride=_ints(given["stride"], n), padding=_ints(given["padding"], n),
                 dilation=_ints(given["dilation"], n), groups=int(given["groups"] or 1), transposed=transposed,
                 output_padding=_ints(given["output_padding"] or 0, n) if transposed else (0,) * n)
    x = arg(given["input"])
    w = arg(given["weight"])
    attrs["module"] = _module(b, n, w, transposed, attrs)
    pattern = f"conv_transpose{n}d" if transposed else f"conv{n}d"
    ref = b.add("conv", "conv", [x, w], tuple(v.shape), dtype, pattern=pattern, **attrs)
    if given["bias"] is not None:
        bias = arg(given["bias"])
        if not (isinstance(bias, tuple) and bias[0] == "leaf"):
            raise Unrecognized("a convolution whose bias is computed")
        leaf = b.leaves[bias[1]]
        shape = (int(v.shape[1]),) + (1,) * n  # [C_out, 1, 1]: broadcast over the output's positions
        b.leaves[bias[1]] = dataclasses.replace(leaf, glue=leaf.glue + [("view", [list(shape)])], shape=shape,
                                                strides=(1,) * len(shape))
        ref = b.ew("add", [ref, bias], dtype)
    return ref


def _module(b: Builder, n: int, weight, transposed: bool, traced: dict[str, Any]) -> str | None:
    """The model's Conv{n}d (ConvTranspose{n}d) module whose weight the convolution reads
    (`self.conv`): the draft reads its stride, padding, dilation, groups (and output_padding) at run
    time, as its forward does (so a problem traced with other channels or groups draws the same
    code); None when the weight is no such module's (F.conv2d on a parameter of its own), or a
    ConvTranspose whose output_padding is not the traced one (called with output_size, its forward
    computes another): the traced settings are written in."""
    if not (isinstance(weight, tuple) and weight[0] == "leaf"):
        return None
    leaf = b.leaves[weight[1]]
    if leaf.kind != "param" or leaf.glue or not str(leaf.ref).endswith(".weight"):
        return None
    expr = b.problem.param_exprs[leaf.ref][: -len(".weight")]
    cls, attrs = b.problem.submodules.get(expr, ("", {}))
    if cls != f"{'ConvTranspose' if transposed else 'Conv'}{n}d" or isinstance(attrs.get("padding"), str) \
            or attrs.get("padding_mode", "zeros") != "zeros":
        return None
    if transposed and "output_padding" in attrs and _ints(attrs["output_padding"], n) != traced["output_padding"]:
        return None  # called with output_size (the attributes are the problem's as built, not a variant's)
    return expr


def _ints(value, n: int) -> tuple[int, ...]:
    items = list(value) if isinstance(value, (list, tuple)) else [value]
    if len(items) == 1:
        items = items * n
    if len(items) != n or not all(isinstance(i, int) for i in items):
        raise Unrecognized(f"a convolution setting {value!r} for {n} dims")
    return tuple(int(i) for i in items)
