"""Which elements of an output a host float64 sample names: the parent draws a secret seed after
the candidate answered, sends it to the reference worker, and both sides draw the same positions
from it (tools/worker/float64.py `host_sample`, tools/judge/exact_host.py), so no list of positions
crosses the pipe."""
from __future__ import annotations

from typing import Any


def positions(numel: int, count: int, seed: int, leaf: int) -> Any:
    """Flat indices into an output of `numel` elements: all of them when `count` or more, else
    `count` drawn uniformly (with repeats) from `seed` and the output's place `leaf` in its tree.
    A CPU int64 tensor."""
    import torch

    if numel <= count:
        return torch.arange(numel, dtype=torch.long)
    generator = torch.Generator().manual_seed((int(seed) * 1_000_003 + int(leaf)) % (1 << 63))
    return torch.randint(numel, (count,), generator=generator, dtype=torch.long)
