"""A candidate's inputs, from the one process that knows the seeds.

The reference worker makes the input sets (its `inputs` request: fresh sets for trials, or sets
of its timing pool) and hands them over as it hands over outputs. On a GPU the parent copies
them, device to device, into the candidate worker's input arena (memory the candidate exported
to the parent), right before the request that uses them; the request then names where each
tensor lies. On the CPU the bytes travel inside the request. Either way the candidate sees
values, never the seed that made them, and only when it must compute on them.
"""
from __future__ import annotations

import contextlib
import time
from typing import TYPE_CHECKING, Any

from tools.processes.process import WorkerProcess
from tools.wire.transport import TransportError, tensor_nodes

if TYPE_CHECKING:
    from tools.processes.reference import Reference

Set = tuple[int | None, int, str]  # (pool slot or None for a fresh set, seed, distribution)


def feed(reference: "Reference", worker: WorkerProcess, sets: list[Set], *, device: str, arena_cap: int,
         timeout: float, lock: contextlib.AbstractContextManager[Any],
         stamps: dict[str, float] | None = None) -> tuple[list[dict[str, Any]], bytes]:
    """Write the input sets `sets` into `worker`; returns one tree per set (and the request's
    payload on the CPU). The reference worker makes them in an arena of at most `arena_cap` bytes,
    under `lock` (it is shared). `stamps`, when given, receives the parent's clock right before
    the copy into the worker starts ("copy_start"), the bytes copied ("copied") and the copy's
    duration by CUDA events on the parent's stream ("copy_ms")."""
    with lock:
        trees, payload, views = staged(reference, worker, sets, device=device, arena_cap=arena_cap, timeout=timeout)
        if views is None:
            return trees, payload
        target, source = views
        if stamps is None:
            target.copy_(source)
        else:
            import torch

            begin, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            stamps.update(copy_start=time.perf_counter(), copied=float(source.numel()))
            begin.record()
            target.copy_(source)
            end.record()
            end.synchronize()
            stamps["copy_ms"] = begin.elapsed_time(end)
        _synchronize(device)
    return trees, b""


def staged(reference: "Reference", worker: WorkerProcess, sets: list[Set], *, device: str, arena_cap: int,
           timeout: float) -> tuple[list[dict[str, Any]], bytes, tuple[Any, Any] | None]:
    """The input sets made by the reference worker, not yet copied: (one tree per set, the
    request's payload on the CPU, and on a GPU the (target in the worker, source in the
    reference) views to copy, or None when there is nothing to copy). The caller holds the lock
    until the copy is done (tools/timing/gate.py queues it on its own stream)."""
    header, payload = reference.checked(
        {"op": "inputs", "sets": [list(s) for s in sets], "arena_cap": arena_cap}, timeout)
    trees = header["tree"]["items"]
    if not device.startswith("cuda"):
        return trees, payload, None
    source = reference.proc.map_arena(header)
    used = arena_used(header["tree"])
    if not used:
        return trees, b"", None
    return trees, b"", (worker.input_arena_of(used, timeout)[:used], source[:used])


def arena_used(tree: dict[str, Any]) -> int:
    """Bytes of an arena that a tree's tensors occupy (from its start)."""
    end = 0
    for node in tensor_nodes(tree):
        where = node.get("arena")
        if where is not None:
            if not (isinstance(where, list) and len(where) == 2):
                raise TransportError("bad arena position")
            end = max(end, int(where[0]) + int(where[1]))
    return end


def _synchronize(device: str) -> None:
    import torch

    torch.cuda.synchronize(device)
