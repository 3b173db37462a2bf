"""Seeded inputs, generated on the device, in the problem's own distribution or a shifted one.

Runs inside worker processes (reference and candidate alike), so both sides build bitwise the
same inputs from the same secret seed without ever sending them across. The problem's own
`get_inputs()` runs with the device as torch's default device, so `torch.randn(...)` in it
allocates and fills on the GPU (a multi-GB input costs milliseconds, not seconds on the CPU),
and integer inputs (class indices, masks) keep exactly the domain the problem gives them.

Distributions:
- "problem": what get_inputs() returns under the seed.
- "shifted": every continuous floating input x is replaced by mean(x) + 2*std(x) + 3*std(x)*z,
  z ~ N(0,1) (seeded): wider and off-centre, so kernels that assume zero mean, unit scale or
  inputs in [0,1) fail. Inputs that are never negative stay non-negative (3*mean(x)*|z|).
  Floating inputs with few distinct values (+-1 targets, 0/1 masks) and all integer and bool
  inputs are left as the problem made them. The evaluator drops "shifted" for a problem whose
  reference output stops being finite under it (the problem does not allow it).
- "signed": every continuous floating input x is replaced by s*z, z ~ N(0,1) (seeded), with
  s = max(|mean(x)|, std(x)): the same magnitude as the problem's, centred on zero, so both
  signs are tested (ReLU on `torch.rand` inputs sees negatives). "signed:0,2" signs only those
  tensor leaves (numbered depth-first over the inputs) and leaves the others as the problem
  made them: the evaluator chooses the leaves where the reference stays finite (tools/judge/trials.py).
- "stress:F": every continuous floating input x is replaced by F * (x + 16*std(x)): scaled up by F
  and moved off centre by 16 standard deviations (non-negative inputs stay non-negative), so that
  softmax and log-sum-exp without the row maximum subtracted overflow, and variances computed as
  E[x^2] - E[x]^2 lose their digits. F is the largest of 1000, 100 and 10 under which the
  reference's output stays finite (tools/judge/distributions.py); none: "stress" is dropped.
"""
from __future__ import annotations

import itertools
from typing import Any

import torch

from tools.worker.precision import cast_floating

DISTRIBUTIONS = ("problem", "shifted", "signed", "stress")
STRESS_SHIFT = 16.0  # standard deviations
CATEGORICAL_MAX_VALUES = 16


class InputError(Exception):
    """get_inputs() or get_init_inputs() returned something we cannot evaluate."""


def call_factory(fn, name: str, device: torch.device | None) -> list[Any]:
    """Call get_inputs/get_init_inputs with `device` as the default device; validate the result."""
    if device is not None and device.type != "cpu":
        with torch.device(device):
            value = fn()
    else:
        value = fn()
    if not isinstance(value, (list, tuple)):
        raise InputError(f"{name}() returned {type(value).__name__}, expected a list")
    for i, item in enumerate(value):
        if not _allowed(item):
            raise InputError(f"{name}() item {i} is a {type(item).__name__}; expected tensors, numbers, tuples or None")
    return list(value)


def _allowed(item: Any) -> bool:
    if item is None or isinstance(item, (torch.Tensor, bool, int, float, str, torch.dtype)):
        return True
    if isinstance(item, (list, tuple)):
        return all(_allowed(x) for x in item)
    return False


def generate(get_inputs, seed: int, distribution: str, device: torch.device, dtype: torch.dtype | None = None) -> list[Any]:
    """The inputs of one trial. Deterministic in (problem, seed, distribution, device). Under a
    half precision (`dtype`), every floating tensor is cast to it as get_inputs() made it, before
    the distribution is applied (tools/worker/precision.py)."""
    kind, leaves = parse_distribution(distribution)
    torch.manual_seed(seed)
    inputs = [_to_device(x, device) for x in call_factory(get_inputs, "get_inputs", device)]
    if dtype is not None:
        inputs = [_map_leaves(x, lambda t: cast_floating(t, dtype)) for x in inputs]
    if kind == "shifted":
        gen = torch.Generator(device=device)
        gen.manual_seed(seed ^ 0x5EED)
        for i in range(len(inputs)):  # one at a time: each problem input is let go as it is replaced
            inputs[i] = _shift(inputs[i], gen)
    elif kind == "signed":
        gen = torch.Generator(device=device)
        gen.manual_seed(seed ^ 0x5167)
        numbers = itertools.count()

        def sign_leaf(t: torch.Tensor) -> torch.Tensor:
            number = next(numbers)
            return _sign(t, gen) if leaves is None or number in leaves else t

        for i in range(len(inputs)):
            inputs[i] = _map_leaves(inputs[i], sign_leaf)
    elif kind == "stress":
        factor = float(min(leaves or {1}))
        for i in range(len(inputs)):
            inputs[i] = _map_leaves(inputs[i], lambda t: _stress(t, factor))
    return inputs


def parse_distribution(name: str) -> tuple[str, frozenset[int] | None]:
    """("problem" | "shifted" | "signed" | "stress", the signed tensor leaves or None for all; for
    "stress", its factor as the one member)."""
    kind, _, rest = name.partition(":")
    if kind not in DISTRIBUTIONS or (rest and kind not in ("signed", "stress")) or (kind == "stress" and not rest):
        raise ValueError(f"unknown distribution {name!r}")
    if not rest:
        return kind, None
    try:
        return kind, frozenset(int(i) for i in rest.split(","))
    except ValueError:
        raise ValueError(f"unknown distribution {name!r}") from None


def _map_leaves(x: Any, fn) -> Any:
    """fn applied to every tensor leaf, depth-first (the order of leaf numbers)."""
    if isinstance(x, torch.Tensor):
        return fn(x)
    if isinstance(x, (list, tuple)):
        return type(x)(_map_leaves(v, fn) for v in x)
    return x


def _sign(x: torch.Tensor, gen: torch.Generator) -> torch.Tensor:
    if not x.is_floating_point() or x.numel() < 2 or is_categorical(x):
        return x
    stats = x.float()
    scale = torch.maximum(stats.mean().abs(), stats.std()).clamp_min(1e-3)
    del stats
    z = torch.randn(x.shape, generator=gen, device=x.device, dtype=torch.float32)
    return z.mul_(scale).to(x.dtype).contiguous(memory_format=_memory_format(x))  # in place: no third copy


def _stress(x: torch.Tensor, factor: float) -> torch.Tensor:
    if not x.is_floating_point() or x.numel() < 2 or is_categorical(x):
        return x
    std = float(x.float().std().clamp_min(1e-3))
    y = x.to(torch.float32).add(STRESS_SHIFT * std).mul_(factor)
    return y.to(x.dtype).contiguous(memory_format=_memory_format(x))


def _to_device(x: Any, device: torch.device) -> Any:
    if isinstance(x, torch.Tensor):
        return x.to(device)
    if isinstance(x, (list, tuple)):
        return type(x)(_to_device(v, device) for v in x)
    return x


def _shift(x: Any, gen: torch.Generator) -> Any:
    if not isinstance(x, torch.Tensor) or not x.is_floating_point() or x.numel() < 2:
        return x
    if is_categorical(x):
        return x
    stats = x.float()
    mean, std, nonnegative = stats.mean(), stats.std(), bool(stats.min() >= 0)
    del stats
    # computed in z's own memory (the same values as the expressions in the module docstring):
    # a multi-GB input held no third and fourth copy for intermediate products
    z = torch.randn(x.shape, generator=gen, device=x.device, dtype=torch.float32)
    if nonnegative:
        y = z.abs_().mul_(3 * mean.clamp_min(1e-3))
    else:
        y = z.mul_(3 * std.clamp_min(1e-3)).add_(mean + 2 * std)
    return y.to(x.dtype).contiguous(memory_format=_memory_format(x))


def _memory_format(x: torch.Tensor) -> torch.memory_format:
    if x.dim() == 4 and x.is_contiguous(memory_format=torch.channels_last) and not x.is_contiguous():
        return torch.channels_last
    return torch.contiguous_format


def is_categorical(x: torch.Tensor) -> bool:
    """A floating tensor holding only a few distinct values (targets, masks stored as float)."""
    sample = x.reshape(-1)[: 1 << 16]
    return torch.unique(sample).numel() <= CATEGORICAL_MAX_VALUES


def describe(inputs: list[Any]) -> list[dict[str, Any]]:
    """A JSON description of inputs, for prompts and the record (shapes, dtypes, domains)."""
    out: list[dict[str, Any]] = []
    for x in inputs:
        if isinstance(x, torch.Tensor):
            d: dict[str, Any] = {"kind": "tensor", "shape": list(x.shape), "dtype": str(x.dtype).removeprefix("torch.")}
            if x.numel() and not x.is_floating_point() and not x.is_complex():
                d["min"], d["max"] = int(x.min()), int(x.max())
            out.append(d)
        elif isinstance(x, (list, tuple)):
            out.append({"kind": type(x).__name__, "items": describe(list(x))})
        else:
            out.append({"kind": "scalar", "type": type(x).__name__, "value": x if isinstance(x, (int, float, bool, str)) or x is None else str(x)})
    return out


def tensor_bytes(values: list[Any]) -> int:
    total = 0
    for x in values:
        if isinstance(x, torch.Tensor):
            total += x.numel() * x.element_size()
        elif isinstance(x, (list, tuple)):
            total += tensor_bytes(list(x))
    return total
