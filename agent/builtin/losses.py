"""Lowering the aten loss ops that reach the IR as one op (agent.builtin.aten hands them here):
`mse_loss`, `smooth_l1_loss`, `huber_loss` and `binary_cross_entropy`, each as its elementwise
terms followed by PyTorch's reduction (0: none, 1: mean, 2: sum) over every element, a 0-d result.

The other losses KernelBench writes reach aten already decomposed into the primitives: hinge
(`mean(clamp(1 - p * t, min=0))`), KL divergence (`kl_div` on log-probabilities: `xlogy`, a sum,
a division by the batch), cosine similarity (row norms, a row sum, then a mean over the rows) and
triplet margin loss (`aten.norm` over rows, then a mean)."""
from __future__ import annotations

from typing import Any

from agent.builtin.builder import Builder
from agent.builtin.ir import NoTemplate, Unrecognized

LOSSES = {"mse_loss", "smooth_l1_loss", "huber_loss", "binary_cross_entropy"}
REDUCTIONS = {0: "none", 1: "mean", 2: "sum"}


def _option(args, kwargs: dict[str, Any], position: int, name: str, default: Any) -> Any:
    return args[position] if len(args) > position else kwargs.get(name, default)


def reduced(b: Builder, terms, reduction: int, dtype: str, what: str):
    """The loss's terms reduced as PyTorch's `reduction` enum says."""
    if reduction == 0:
        return terms
    if reduction not in REDUCTIONS:
        raise Unrecognized(f"{what} with reduction {reduction}")
    dims = tuple(range(len(b.shape(terms))))
    if not dims:
        return terms
    if reduction == 1:
        return b.mean(terms, dims, False, dtype, pattern="loss")
    return b.reduce("sum", terms, dims, False, dtype, pattern="loss")


def lower_loss(b: Builder, name: str, args, kwargs: dict[str, Any], arg, dtype: str):
    x, y = arg(args[0]), arg(args[1])
    if name == "binary_cross_entropy":
        if _option(args, kwargs, 2, "weight", None) is not None:
            raise Unrecognized("binary_cross_entropy with a weight")
        reduction = int(_option(args, kwargs, 3, "reduction", 1))
        # -(y * max(log x, -100) + (1 - y) * max(log(1 - x), -100)), as PyTorch clamps the logs
        log_x = b.ew("maximum", [b.ew("log", [x], dtype), -100.0], dtype)
        log_1mx = b.ew("maximum", [b.ew("log", [b.ew("sub", [1.0, x], dtype)], dtype), -100.0], dtype)
        pos = b.ew("mul", [y, log_x], dtype)
        neg = b.ew("mul", [b.ew("sub", [1.0, y], dtype), log_1mx], dtype)
        return reduced(b, b.ew("neg", [b.ew("add", [pos, neg], dtype)], dtype), reduction, dtype, name)
    reduction = int(_option(args, kwargs, 2, "reduction", 1))
    diff = b.ew("sub", [x, y], dtype)
    if name == "mse_loss":
        return reduced(b, b.ew("mul", [diff, diff], dtype), reduction, dtype, name)
    size = b.ew("abs", [diff], dtype)
    if name == "smooth_l1_loss":
        beta = float(_option(args, kwargs, 3, "beta", 1.0))
        if beta == 0.0:
            return reduced(b, size, reduction, dtype, name)
        # |d| < beta: 0.5 d^2 / beta; else |d| - 0.5 beta
        small = b.ew("div", [b.ew("mul", [b.ew("mul", [diff, diff], dtype), 0.5], dtype), beta], dtype)
        large = b.ew("sub", [size, b.ew("mul", [beta, 0.5], dtype)], dtype)
        terms = b.ew("where", [b.ew("lt", [size, beta], dtype), small, large], dtype)
        return reduced(b, terms, reduction, dtype, name)
    if name == "huber_loss":
        delta = float(_option(args, kwargs, 3, "delta", 1.0))
        # |d| < delta: 0.5 d^2; else delta (|d| - 0.5 delta)
        small = b.ew("mul", [b.ew("mul", [diff, diff], dtype), 0.5], dtype)
        large = b.ew("mul", [b.ew("sub", [size, b.ew("mul", [delta, 0.5], dtype)], dtype), delta], dtype)
        terms = b.ew("where", [b.ew("lt", [size, delta], dtype), small, large], dtype)
        return reduced(b, terms, reduction, dtype, name)
    raise NoTemplate(f"aten.{name}")
