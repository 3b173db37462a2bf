"""The process tree under a worker, read from /proc: its resident memory (the parent's host-memory
watchdog for CUDA workers, where an address-space limit cannot be used) and its children."""
from __future__ import annotations

import os


def rss_bytes(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return 0


def tree_rss_bytes(pid: int) -> int:
    """Resident memory of a process and all its descendants (a sandboxed worker runs below
    bwrap), summed."""
    total, todo, seen = 0, [pid], set()
    while todo:
        p = todo.pop()
        if p in seen:
            continue
        seen.add(p)
        total += rss_bytes(p)
        todo += children(p)
    return total


def children(pid: int) -> list[int]:
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return []
    out: list[int] = []
    for tid in tasks:
        try:
            with open(f"/proc/{pid}/task/{tid}/children") as f:
                out += [int(x) for x in f.read().split()]
        except (OSError, ValueError):
            continue
    return out
