"""Lowering the aten normalization ops that agent.builtin.aten hands here, into the IR's
primitives (a mean, the mean of the squared deviations, an elementwise epilogue):

- `native_group_norm`: the input seen as [N, G, C/G, H*W], normalized over its last two dims
  (one row per (sample, group)); the affine weight and bias per channel seen as [G, C/G, 1];
- `native_batch_norm` (and its `_native_batch_norm_legit*` forms): with running statistics and
  training off (a module in eval()), elementwise per channel; in training mode, statistics over
  every dim but the channel's: two `bnstats` nodes (agent.builtin.batchnorm drafts them, and the
  running statistics' update). InstanceNorm reaches it as a batch norm in training mode without
  running statistics over the input seen as [1, N*C, H, W], which normalizes each (sample, channel)
  row over H*W: a row reduction, as before.

Layer norm is lowered in agent.builtin.aten (it reaches aten as one op over trailing dims)."""
from __future__ import annotations

import math
from typing import Any

from agent.builtin.builder import Builder, Unusable
from agent.builtin.ir import Leaf, Unrecognized

NORMS = {"native_group_norm", "native_batch_norm", "_native_batch_norm_legit", "_native_batch_norm_legit_no_training",
         "empty"}


def all_dims(b: Builder, x) -> tuple[int, ...]:
    """Every dim of `x` (a reduction over all of them: a 0-d result)."""
    shape = b.shape(x)
    if not shape:
        raise Unrecognized("a reduction of a 0-d tensor")
    return tuple(range(len(shape)))


def reshaped(b: Builder, ref, shape: tuple[int, ...]):
    """`ref` seen with another shape: a leaf gets the reshape as glue (replayed in torch before the
    kernel, with the strides torch gives it); a computed value becomes a view node."""
    import torch

    shape = tuple(int(s) for s in shape)
    if b.shape(ref) == shape:
        return ref
    if ref[0] == "leaf":
        leaf = b.leaves[ref[1]]
        strides = torch.empty_strided(leaf.shape, leaf.strides, device="meta").reshape(shape).stride()
        return b.leaf(Leaf(leaf.kind, leaf.ref, leaf.glue + [("reshape", [list(shape)])], shape, tuple(strides),
                           leaf.dtype))
    return b.add("ew", "view", [ref], shape, b.nodes[ref[1]].dtype)


def normalized(b: Builder, x, dims: tuple[int, ...], eps: Any, dtype: str, pattern: str):
    """(x - mean) * rsqrt(var + eps) over `dims` (the biased variance, as the norms use)."""
    mu = b.mean(x, dims, True, dtype, pattern=pattern)
    centered = b.ew("sub", [x, mu], dtype)
    var = b.mean(b.ew("mul", [centered, centered], dtype), dims, True, dtype)
    return b.ew("mul", [centered, b.ew("rsqrt", [b.ew("add", [var, eps], dtype)], dtype)], dtype)


def _per_channel(b: Builder, ref, channels: int, trailing: int):
    """A per-channel vector [C] seen as [C, 1, ..., 1] (`trailing` ones) to broadcast over a
    channels-first tensor."""
    if math.prod(b.shape(ref)) != channels:
        raise Unrecognized(f"a per-channel operand of shape {list(b.shape(ref))} for {channels} channels")
    return reshaped(b, ref, (channels,) + (1,) * trailing)


def _affine(b: Builder, y, weight, bias, dtype: str):
    if weight is not None:
        y = b.ew("mul", [y, weight], dtype)
    if bias is not None:
        y = b.ew("add", [y, bias], dtype)
    return y


def lower_norm(b: Builder, name: str, args, kwargs: dict[str, Any], arg, dtype: str):
    if name == "empty":  # the batch norm's reserve buffer: never read by a forward we can draft
        return Unusable("an uninitialized tensor (aten.empty)")
    if name == "native_group_norm":
        return _group_norm(b, args, arg, dtype)
    return _batch_norm(b, name, args, kwargs, arg, dtype)


def _group_norm(b: Builder, args, arg, dtype: str):
    x = arg(args[0])
    weight = arg(args[1]) if args[1] is not None else None
    bias = arg(args[2]) if args[2] is not None else None
    n, c, hw, groups, eps = int(args[3]), int(args[4]), int(args[5]), int(args[6]), float(args[7])
    shape = b.shape(x)
    if c % groups:
        raise Unrecognized(f"group norm of {c} channels in {groups} groups")
    seen = reshaped(b, x, (n, groups, c // groups, hw))
    y = normalized(b, seen, (2, 3), eps, dtype, "group_norm")
    weight = reshaped(b, weight, (groups, c // groups, 1)) if weight is not None else None
    bias = reshaped(b, bias, (groups, c // groups, 1)) if bias is not None else None
    y = _affine(b, y, weight, bias, dtype)
    out = ("view", y, [("reshape", [list(shape)])], tuple(shape))
    return [out, Unusable("group norm's saved mean"), Unusable("group norm's saved rstd")]


def _batch_norm(b: Builder, name: str, args, kwargs: dict[str, Any], arg, dtype: str):
    if name == "_native_batch_norm_legit_no_training":
        x, w, bs, rm, rv = args[:5]
        training, eps = False, float(args[6])
    elif name == "_native_batch_norm_legit" and len(args) == 6:  # the no_stats form
        (x, w, bs), rm, rv = args[:3], None, None
        training, eps = bool(args[3]), float(args[5])
    else:
        x, w, bs, rm, rv = args[:5]
        training, eps = bool(args[5]), float(args[7])
    x = arg(x)
    shape = b.shape(x)
    if len(shape) < 2:
        raise Unrecognized(f"batch norm of a {len(shape)}-d input")
    channels, trailing = shape[1], len(shape) - 2
    weight = _per_channel(b, arg(w), channels, trailing) if w is not None else None
    bias = _per_channel(b, arg(bs), channels, trailing) if bs is not None else None
    saved = [Unusable("batch norm's saved mean"), Unusable("batch norm's saved rstd")]
    if not training:
        if rm is None or rv is None:
            raise Unrecognized("batch norm in eval mode without running statistics")
        mean = _per_channel(b, arg(rm), channels, trailing)
        var = _per_channel(b, arg(rv), channels, trailing)
        y = b.ew("mul", [b.ew("sub", [x, mean], dtype),
                         b.ew("rsqrt", [b.ew("add", [var, eps], dtype)], dtype)], dtype)
        return [_affine(b, y, weight, bias, dtype)] + saved
    if rm is not None or rv is not None or shape[0] != 1:  # statistics per channel across the batch
        return [_batch_statistics(b, x, (rm, rv), arg, eps, weight, bias, dtype)] + saved
    dims = tuple(d for d in [0, *range(2, len(shape))] if shape[d] != 1)
    if not dims:
        raise Unrecognized(f"batch norm in training mode over a single element per channel ({list(shape)})")
    if list(dims) != list(range(dims[0], dims[-1] + 1)):
        raise Unrecognized(f"batch norm in training mode (statistics over the batch and spatial dims {list(dims)} "
                           f"of {list(shape)}, a column reduction across the batch)")
    y = normalized(b, x, dims, eps, dtype, "instance_norm")  # [1, N*C, H, W]: InstanceNorm
    return [_affine(b, y, weight, bias, dtype)] + saved


def _batch_statistics(b: Builder, x, running: tuple[Any, Any], arg, eps: float, weight, bias, dtype: str):
    """Batch norm in training mode over [N, C, *spatial]: the per-channel mean and biased variance
    over every dim but the channel's as two `bnstats` nodes of shape [1, C, 1, ...] (drafted by
    agent.builtin.batchnorm, which also updates the running statistics named in their attrs), then
    the normalization as elementwise nodes, eps an arithmetic operand (a module scalar)."""
    shape = b.shape(x)
    names: tuple[str, str] | None = None
    if running[0] is not None and running[1] is not None:
        refs = [arg(r) for r in running]
        leaves = [b.leaves[r[1]] for r in refs if r[0] == "leaf"]
        if len(leaves) != 2 or any(leaf.kind != "param" or leaf.glue for leaf in leaves):
            raise Unrecognized("batch norm in training mode with computed running statistics")
        names = (str(leaves[0].ref), str(leaves[1].ref))
    elif running[0] is not None or running[1] is not None:
        raise Unrecognized("batch norm in training mode with only one running statistic")
    stat_shape = (1, shape[1]) + (1,) * (len(shape) - 2)
    mean = b.add("bnstats", "mean", [x], stat_shape, dtype, pattern="batch_norm", running=names)
    var = b.add("bnstats", "var", [x], stat_shape, dtype, running=names)
    centered = b.ew("sub", [x, mean], dtype)
    y = b.ew("mul", [centered, b.ew("rsqrt", [b.ew("add", [var, eps], dtype)], dtype)], dtype)
    return _affine(b, y, weight, bias, dtype)
