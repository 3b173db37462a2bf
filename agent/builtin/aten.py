"""Lowering one aten op to the IR (agent.builtin.builder): elementwise ops map to `ew` nodes, and
composite ops (softmax, log-softmax, logsumexp, layer norm, var/std, mean, vector norms, clamp,
addmm/baddbmm) are expanded into the three primitives (elementwise, reduction, matrix product), so
each kernel template only needs those."""
from __future__ import annotations

import math

from agent.builtin.builder import Builder, Unusable
from agent.builtin.conv_lower import CONV_OPS, lower_conv
from agent.builtin.ir import NoTemplate, Unrecognized
from agent.builtin.losses import LOSSES, lower_loss
from agent.builtin.norms import NORMS, all_dims, lower_norm
from agent.builtin.window_lower import argreduce, lower_window_op

UNARY = {"relu", "sigmoid", "tanh", "exp", "log", "sqrt", "rsqrt", "abs", "neg", "reciprocal", "silu", "erf",
         "sin", "cos", "floor", "ceil", "square", "exp2", "log2", "log1p", "expm1", "mish", "hardswish",
         "hardsigmoid", "relu6", "selu", "sign", "logsigmoid"}


def lower_op(b: Builder, name: str, overload: str, node, args, kwargs, arg, dtype: str, v):
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
        lo, hi = (arg(x) if isinstance(x, torch_node_type()) else x for x in (lo, hi))  # a constant bound is a scalar
        if any(isinstance(x, tuple) for x in (lo, hi)):
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
    if name in LOSSES:
        return lower_loss(b, name, args, kwargs, arg, dtype)
    if name in NORMS:
        return lower_norm(b, name, args, kwargs, arg, dtype)
    if name == "scalar_tensor":  # a constant (cosine_similarity's eps): a Python scalar in the IR
        return float(args[0])
    if name == "xlogy":
        return b.ew("xlogy", [arg(args[0]), arg(args[1])], dtype)
    # reductions (over every dim when no dim is given, or an empty list: a 0-d result)
    if name in ("sum", "mean", "max", "min") and overload == "default":
        x = arg(args[0])
        dims = all_dims(b, x)
        if name == "mean":
            return b.mean(x, dims, False, dtype, pattern="reduction")
        return b.reduce(name, x, dims, False, dtype, pattern="reduction")
    if name in ("amax", "amin") or (name in ("sum", "mean") and overload != "default"):
        dims = args[1] if len(args) > 1 else kwargs.get("dim")
        keepdim = bool(args[2] if len(args) > 2 else kwargs.get("keepdim", False))
        x = arg(args[0])
        dims = all_dims(b, x) if dims is None or (isinstance(dims, (list, tuple)) and not dims) else \
            tuple([dims] if isinstance(dims, int) else dims)
        if name == "mean":
            return b.mean(x, dims, keepdim, dtype, pattern="reduction")
        kind = {"sum": "sum", "amax": "max", "amin": "min"}[name]
        return b.reduce(kind, x, dims, keepdim, dtype, pattern="reduction")
    if name in ("max", "min") and overload == "dim":
        keepdim = bool(args[2] if len(args) > 2 else kwargs.get("keepdim", False))
        x = arg(args[0])
        values = b.reduce(name, x, (int(args[1]),), keepdim, dtype, pattern="reduction")
        return [values, argreduce(b, f"arg{name}", x, int(args[1]), keepdim)]
    if name in ("max", "min") and overload == "other":
        return b.ew("maximum" if name == "max" else "minimum", [arg(args[0]), arg(args[1])], dtype)
    if name in ("var", "std"):
        if overload != "correction":
            raise Unrecognized(f"aten.{name}.{overload}")
        dims = args[1] if len(args) > 1 else kwargs.get("dim")
        correction = kwargs.get("correction", 1)
        correction = 1.0 if correction is None else float(correction)
        keepdim = bool(kwargs.get("keepdim", False))
        x = arg(args[0])
        dims = all_dims(b, x) if dims is None or (isinstance(dims, (list, tuple)) and not dims) else \
            tuple([dims] if isinstance(dims, int) else dims)
        full = b.shape(x)
        count = math.prod(full[d % len(full)] for d in dims)
        mu = b.mean(x, dims, True, dtype, pattern="reduction")
        centered = b.ew("sub", [x, mu], dtype)
        sq = b.reduce("sum", b.ew("mul", [centered, centered], dtype), dims, keepdim, dtype, pattern="reduction")
        out = b.ew("mul", [sq, 1.0 / max(count - correction, 1e-30)], dtype)
        return b.ew("sqrt", [out], dtype) if name == "std" else out
    if name in ("linalg_vector_norm", "norm"):  # aten.norm: torch.norm(x, p, dim) (triplet margin loss)
        ord_ = args[1] if len(args) > 1 else kwargs.get("ord", kwargs.get("p", 2))
        ord_ = 2.0 if ord_ is None else float(ord_)
        dims = args[2] if len(args) > 2 else kwargs.get("dim")
        keepdim = bool(args[3] if len(args) > 3 else kwargs.get("keepdim", False))
        x = arg(args[0])
        dims = all_dims(b, x) if dims is None or (isinstance(dims, (list, tuple)) and not dims) else \
            tuple([dims] if isinstance(dims, int) else dims)
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
        return [y, Unusable("layer norm's saved mean"), Unusable("layer norm's saved rstd")]
    # matrix products
    if name in ("mm", "bmm"):
        return b.add("mm", name, [arg(args[0]), arg(args[1])], shape, dtype, pattern="matmul")
    if name == "mv":  # a matrix-vector product: the vector as a [K, 1] matrix, the result viewed as [M]
        return _matrix_vector(b, arg(args[0]), arg(args[1]), shape, dtype)
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
    if name in CONV_OPS:  # convolutions (agent.builtin.conv_lower)
        return lower_conv(b, args, kwargs, arg, dtype, v)
    window = lower_window_op(b, name, node, args, kwargs, arg, dtype, v)  # pooling, scans, arg-reductions
    if window is not None:
        return window
    raise NoTemplate(f"aten.{name}.{overload}")


def torch_node_type():
    import torch

    return torch.fx.Node


def _matrix_vector(b: Builder, matrix, vector, shape, dtype: str):
    """aten.mv(A, x) as mm(A, x.unsqueeze(1)) viewed as [M]: the vector leaf gets the unsqueeze as glue."""
    import dataclasses

    if not (isinstance(vector, tuple) and vector[0] == "leaf"):
        raise Unrecognized("a matrix-vector product of a computed vector")
    leaf = b.leaves[vector[1]]
    b.leaves[vector[1]] = dataclasses.replace(leaf, glue=leaf.glue + [("unsqueeze", [1])], shape=leaf.shape + (1,),
                                              strides=leaf.strides + (1,))
    product = b.add("mm", "mm", [matrix, vector], (shape[0], 1), dtype, pattern="matvec")
    return b.add("ew", "view", [product], shape, dtype)
