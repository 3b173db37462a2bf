"""Lowering the window ops to the IR (agent.builtin.aten hands over what it does not know):

- pooling: aten.max_pool{1,2,3}d(_with_indices) and aten.avg_pool{1,2,3}d become one `pool` node
  (name max | avg) with the traced kernel size, stride, padding, dilation, ceil_mode,
  count_include_pad and divisor_override; nn.MaxPool1d/AvgPool1d trace as the 2-d op on an
  unsqueezed input, which is lowered back to a 1-d pool. When the model holds exactly one pooling
  module of that kind with those settings, the node names it (`module`): the draft then reads the
  settings from it at run time, so another kernel size or stride is computed, never refused;
- scans: aten.cumsum / cumprod become a `scan` node (sum | prod) along one dim; aten.flip a
  `flip` node, torch.cat of constant zeros and a tensor a `pad` node (zeros before or after along
  the dim), aten.slice of a computed value a `slice` node, aten.zeros_like (and its kin) a `const`
  node: agent.builtin.scans turns the chain around a scan into a reverse or exclusive scan;
- arg-reductions: aten.argmax / argmin over one dim become an `argreduce` node with an int64
  result (so do the indices of max(dim) / min(dim), agent.builtin.aten).
"""
from __future__ import annotations

from typing import Any

from agent.builtin.builder import Builder, Unusable
from agent.builtin.ir import Unrecognized

# aten op -> (max | avg, spatial dims, whether it returns indices too)
POOLS = {
    "max_pool1d": ("max", 1, False), "max_pool2d": ("max", 2, False), "max_pool3d": ("max", 3, False),
    "max_pool1d_with_indices": ("max", 1, True), "max_pool2d_with_indices": ("max", 2, True),
    "max_pool3d_with_indices": ("max", 3, True),
    "avg_pool1d": ("avg", 1, False), "avg_pool2d": ("avg", 2, False), "avg_pool3d": ("avg", 3, False),
}
# the positional arguments after the input, with their defaults
POOL_ARGS = {"max": (("kernel_size", None), ("stride", ()), ("padding", 0), ("dilation", 1), ("ceil_mode", False)),
             "avg": (("kernel_size", None), ("stride", ()), ("padding", 0), ("ceil_mode", False),
                     ("count_include_pad", True), ("divisor_override", None))}
MODULE_CLASS = {"max": "MaxPool", "avg": "AvgPool"}
CONSTANTS = {"zeros_like", "zeros", "new_zeros", "full", "full_like", "new_full", "fill", "scalar_tensor"}


def lower_window_op(b: Builder, name: str, node, args, kwargs, arg, dtype: str, v) -> Any:
    """The IR for a window op, or None when `name` is none of them."""
    if name in POOLS:
        return _pool(b, name, node, args, kwargs, arg, dtype, v)
    if name in ("cumsum", "cumprod"):
        if kwargs.get("dtype") is not None and str(kwargs["dtype"]) != str(v.dtype):
            raise Unrecognized(f"{name} with dtype={kwargs['dtype']}")
        x = arg(args[0])
        rank = len(b.shape(x))
        dim = int(args[1] if len(args) > 1 else kwargs["dim"]) % max(rank, 1)
        return b.add("scan", "sum" if name == "cumsum" else "prod", [x], tuple(v.shape), dtype, dim=dim,
                     pattern=name)
    if name == "flip":
        x = arg(args[0])
        rank = len(b.shape(x))
        dims = tuple(sorted(int(d) % rank for d in (args[1] if len(args) > 1 else kwargs["dims"])))
        return b.add("flip", "flip", [x], tuple(v.shape), dtype, dims=dims)
    if name in CONSTANTS:
        value = _constant_value(name, args, kwargs)
        if value is None:
            raise Unrecognized(f"aten.{name} with a fill value that is not a number")
        return b.add("const", "fill", [], tuple(v.shape), dtype, value=value)
    if name == "cat":
        return _cat(b, args, kwargs, arg, dtype, v)
    if name == "slice":
        x = arg(args[0])
        rank = len(b.shape(x))
        dim = int(args[1] if len(args) > 1 else kwargs.get("dim", 0)) % rank
        start = args[2] if len(args) > 2 else kwargs.get("start")
        end = args[3] if len(args) > 3 else kwargs.get("end")
        step = args[4] if len(args) > 4 else kwargs.get("step", 1)
        return b.add("slice", "slice", [x], tuple(v.shape), dtype, dim=dim, start=start, end=end, step=step)
    if name in ("argmax", "argmin"):
        dim = args[1] if len(args) > 1 else kwargs.get("dim")
        keepdim = bool(args[2] if len(args) > 2 else kwargs.get("keepdim", False))
        if dim is None:
            raise Unrecognized(f"{name} over all elements (no dim): a reduction across programs is not implemented")
        x = arg(args[0])
        return argreduce(b, name, x, int(dim), keepdim)
    return None


def argreduce(b: Builder, name: str, x, dim: int, keepdim: bool):
    """An argmax / argmin over one dim: int64 indices (the first on ties, NaN counting as the extreme)."""
    shape = b.shape(x)
    if not shape:
        raise Unrecognized(f"{name} of a scalar")
    dim %= len(shape)
    out = tuple(1 if i == dim else s for i, s in enumerate(shape)) if keepdim else \
        tuple(s for i, s in enumerate(shape) if i != dim)
    return b.add("argreduce", name, [x], out, "torch.int64", dims=(dim,), keepdim=keepdim, pattern=name)


def _constant_value(name: str, args, kwargs) -> float | None:
    if name in ("zeros_like", "zeros", "new_zeros"):
        return 0.0
    value = {"full": 1, "full_like": 1, "new_full": 2, "fill": 1, "scalar_tensor": 0}[name]
    fill = args[value] if len(args) > value else kwargs.get("fill_value", kwargs.get("value"))
    return float(fill) if isinstance(fill, (int, float)) and not isinstance(fill, bool) else None


def _cat(b: Builder, args, kwargs, arg, dtype: str, v):
    """torch.cat of constant zeros and one tensor along a dim: a `pad` node (zeros before and after)."""
    tensors = list(args[0])
    dim = int(args[1] if len(args) > 1 else kwargs.get("dim", 0)) % len(v.shape)
    refs = [arg(t) for t in tensors]
    constant = [isinstance(r, tuple) and r[0] == "node" and b.nodes[r[1]].op == "const" for r in refs]
    if constant.count(False) != 1:
        raise Unrecognized("torch.cat of several computed tensors")
    at = constant.index(False)
    if any(b.nodes[r[1]].attrs["value"] != 0.0 for r, c in zip(refs, constant) if c):
        raise Unrecognized("torch.cat of a constant other than zeros")
    before = sum(b.shape(r)[dim] for r in refs[:at])
    after = sum(b.shape(r)[dim] for r in refs[at + 1:])
    return b.add("pad", "pad", [refs[at]], tuple(v.shape), dtype, dim=dim, before=before, after=after)


def _pool(b: Builder, name: str, node, args, kwargs, arg, dtype: str, v):
    kind, n, with_indices = POOLS[name]
    settings = {}
    for i, (key, default) in enumerate(POOL_ARGS[kind], start=1):
        settings[key] = args[i] if len(args) > i else kwargs.get(key, default)
    kernel = _expand(settings["kernel_size"], n)
    stride = _expand(settings["stride"], n) if settings["stride"] not in ((), [], None) else kernel
    padding = _expand(settings["padding"], n)
    dilation = _expand(settings.get("dilation", 1), n)
    source = args[0]
    values = v[0] if with_indices else v
    out_shape = tuple(values.shape)
    dtype = str(values.dtype)  # (a tuple's dtype is not the op's: lower names float32 for it)
    # nn.MaxPool1d / AvgPool1d: the 2-d op over an unsqueezed input, window 1 along the added dim
    unsqueezed = getattr(source, "target", None)
    if n == 2 and getattr(getattr(unsqueezed, "overloadpacket", None), "__name__", "") == "unsqueeze" \
            and int(source.args[1]) % len(source.meta["val"].shape) == len(source.meta["val"].shape) - 2 \
            and (kernel[0], stride[0], padding[0], dilation[0]) == (1, 1, 0, 1):
        n, source = 1, source.args[0]
        kernel, stride, padding, dilation = kernel[1:], stride[1:], padding[1:], dilation[1:]
        out_shape = out_shape[:-2] + out_shape[-1:]
    x = arg(source)
    if len(b.shape(x)) not in (n + 1, n + 2):
        raise Unrecognized(f"a {n}-d pooling of a {len(b.shape(x))}-d tensor")
    attrs = dict(dims=n, kernel=kernel, stride=stride, padding=padding, dilation=dilation,
                 ceil_mode=bool(settings["ceil_mode"]), count_include_pad=bool(settings.get("count_include_pad", True)),
                 divisor_override=settings.get("divisor_override"))
    attrs["module"] = _module(b, kind, n, attrs)
    ref = b.add("pool", kind, [x], out_shape, dtype, pattern=f"{kind}_pool{n}d", **attrs)
    return [ref, Unusable(f"the indices of {kind} pooling")] if with_indices else ref


def _expand(value, n: int) -> tuple[int, ...]:
    items = list(value) if isinstance(value, (list, tuple)) else [value]
    if len(items) == 1:
        items = items * n
    if len(items) != n or not all(isinstance(i, int) for i in items):
        raise Unrecognized(f"a pooling setting {value!r} for {n} dims")
    return tuple(int(i) for i in items)


def _module(b: Builder, kind: str, n: int, attrs: dict[str, Any]) -> str | None:
    """The expression of the model's one pooling module of this kind with these settings (read at
    run time by the draft), or None: the forward pools with settings of its own (F.max_pool2d)."""
    wanted = f"{MODULE_CLASS[kind]}{n}d"
    found = []
    for expr, (cls, a) in b.problem.submodules.items():
        if cls != wanted:
            continue
        try:
            kernel = _expand(a.get("kernel_size"), n)
            stride = _expand(a["stride"], n) if a.get("stride") not in (None, (), []) else kernel
            same = (kernel, stride, _expand(a.get("padding", 0), n), _expand(a.get("dilation", 1), n)) == \
                (attrs["kernel"], attrs["stride"], attrs["padding"], attrs["dilation"]) \
                and bool(a.get("ceil_mode", False)) == attrs["ceil_mode"] \
                and bool(a.get("count_include_pad", True)) == attrs["count_include_pad"] \
                and a.get("divisor_override") == attrs["divisor_override"]
        except Unrecognized:
            same = False
        if same:
            found.append(expr)
    if len(found) > 1:
        raise Unrecognized(f"{len(found)} {wanted} modules with the same settings: which one the forward uses is unknown")
    return found[0] if found else None
