"""Index spaces: how a kernel's tile indexes a tensor. A target shape is split into runs of dims
that each flatten into one index variable (a Group); an operand broadcast to that shape is read
with its expanded strides, and its offset along a run is written in terms of the run's variable."""
from __future__ import annotations

import math
from dataclasses import dataclass

from agent.builtin.ir import Unrecognized


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
