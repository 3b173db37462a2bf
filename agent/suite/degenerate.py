"""What a reference's outputs say about a problem: degenerate kinds over several draws.

`degenerate_kinds(pairs)` looks at (outputs, inputs after forward) of each draw, one draw's
tensors in memory at a time (outputs can be GBs), and names what holds on every draw: a
constant output, an output that does not change when the inputs are re-drawn, an output equal
to an input, an output mostly one value, NaN or Inf, inputs that are the same for every seed. How
these become errors or warnings is agent.suite.check's (`degeneracy_flags`).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

MOSTLY_CONSTANT = 0.99
SAMPLE = 1 << 20  # elements looked at first (or only, for the mode) in large tensors


@dataclass
class _Draw:
    """What one draw says, kept instead of its tensors (outputs can be GBs)."""

    out_digests: list[str | None]  # per output leaf; None for a non-tensor
    in_digests: list[str]
    constant: dict[int, float]  # output -> its single value
    mode_share: dict[int, float]  # output -> share of its most common value
    nonfinite: set[int]
    equals_input: dict[int, set[int]]  # output -> inputs it equals


def _facts(outputs: Any, inputs: Any) -> _Draw:
    import torch

    outs = _leaves(outputs)
    ins = [x for x in _leaves(inputs) if isinstance(x, torch.Tensor)]
    draw = _Draw([_digest(o) if isinstance(o, torch.Tensor) else None for o in outs], [_digest(i) for i in ins],
                 {}, {}, set(), {})
    for j, out in enumerate(outs):
        if not isinstance(out, torch.Tensor):
            continue
        if out.is_floating_point() and not bool(torch.isfinite(out).all()):
            draw.nonfinite.add(j)
        if out.numel() > 1:
            value = _constant_value(out)
            if value is not None:
                draw.constant[j] = value
            else:
                draw.mode_share[j] = _mode_share(out)
        draw.equals_input[j] = {k for k, inp in enumerate(ins) if _same(out, inp)}
    return draw


def _digest(t: Any) -> str:
    """The tensor's shape, dtype and a hash of its bytes."""
    import hashlib

    import torch

    raw = t.detach().cpu().contiguous().reshape(-1).view(torch.uint8).numpy()
    return f"{tuple(t.shape)}:{t.dtype}:{hashlib.sha256(raw).hexdigest()}"


def degenerate_kinds(pairs: Any) -> dict[tuple[str, int], str]:
    """Degenerate kinds over draws of (outputs, inputs after forward), one draw in memory at a time."""
    draws = [_facts(o, i) for o, i in pairs]
    if not draws:
        return {}
    found: dict[tuple[str, int], str] = {}
    inputs_vary = any(d.in_digests != draws[0].in_digests for d in draws[1:])
    if draws[0].in_digests and not inputs_vary:
        found[("constant-inputs", -1)] = "get_inputs() gives the same values for every seed"
    n_out = min(len(d.out_digests) for d in draws)
    for j in range(n_out):
        label = f"output {j}" if n_out > 1 else "the output"
        if any(d.out_digests[j] is None for d in draws):
            continue  # scalars: nothing to say about their elements
        if any(j in d.nonfinite for d in draws):
            found[("non-finite", j)] = f"{label} holds NaN or Inf"
        if all(j in d.constant for d in draws):
            found[("constant-output", j)] = f"{label} is constant (every element {draws[0].constant[j]:.6g})"
            continue
        shares = [d.mode_share.get(j, 1.0) for d in draws]
        if all(j in d.mode_share or j in d.constant for d in draws) and min(shares) >= MOSTLY_CONSTANT:
            found[("mostly-constant", j)] = f"{label} is {min(shares):.1%} one value"
        if inputs_vary and all(d.out_digests[j] == draws[0].out_digests[j] for d in draws[1:]):
            found[("input-independent", j)] = f"{label} does not change when the inputs are re-drawn"
            continue
        common = set.intersection(*(d.equals_input.get(j, set()) for d in draws))
        if common:
            found[("identity", j)] = (f"{label} equals input {min(common)}: the op is trivial on these inputs "
                                      "(e.g. ReLU of non-negative values)")
    return found


def _leaves(tree: Any) -> list[Any]:
    if isinstance(tree, (list, tuple)):
        return [x for item in tree for x in _leaves(item)]
    return [tree]


def _same(a: Any, b: Any) -> bool:
    import torch

    if not (isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor)):
        return False
    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    fa, fb = a.reshape(-1), b.reshape(-1)
    step = max(1, fa.numel() // SAMPLE)
    if not _close(fa[::step], fb[::step]):  # most outputs differ from the inputs: a sample says so cheaply
        return False
    return _close(fa, fb)


def _close(a: Any, b: Any) -> bool:
    import torch

    if a.is_floating_point() or a.is_complex():
        return bool(torch.allclose(a, b, rtol=1e-6, atol=0.0, equal_nan=True))
    return bool(torch.equal(a, b))


def _constant_value(t: Any) -> float | None:
    flat = t.reshape(-1)
    first = flat[0]
    if bool((flat == first).all()):
        return float(first.real if flat.is_complex() else first)
    return None


def _mode_share(t: Any) -> float:
    """The share of the most common value (estimated on an evenly strided sample of large tensors)."""
    import torch

    flat = t.reshape(-1)
    if flat.is_complex():
        return 0.0
    flat = flat[:: max(1, flat.numel() // SAMPLE)]
    _, counts = torch.unique(flat, return_counts=True)
    return float(counts.max()) / flat.numel()
