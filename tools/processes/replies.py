"""What the parent accepts in a reply header from a candidate's worker, checked before anything
reads it. The worker is the candidate's process: it can write any frame it likes, with the
request's nonce, so every field the parent uses is checked for its type (and numbers for being
finite) here, once. A malformed reply is the candidate's doing: verdict `rejected`, never an
evaluator fault.
"""
from __future__ import annotations

import math
from typing import Any, Callable


class MalformedReply(Exception):
    """A reply header the parent refuses; str() names the field."""


def _number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def _int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and v >= 0


def _list_of(check: Callable[[Any], bool], limit: int) -> Callable[[Any], bool]:
    return lambda v: isinstance(v, list) and len(v) <= limit and all(check(x) for x in v)


def _dict_of(check: Callable[[Any], bool], limit: int = 100_000) -> Callable[[Any], bool]:
    return lambda v: isinstance(v, dict) and len(v) <= limit and all(isinstance(k, str) and check(x) for k, x in v.items())


def _str(v: Any) -> bool:
    return isinstance(v, str)


def _cuda(v: Any) -> bool:
    """A build's CUDA extensions: numbers; a load of extensions found built says how long it took."""
    return _dict_of(_number, 10)(v) and (not v.get("cached") or "seconds" in v)


FIELDS: dict[str, Callable[[Any], bool]] = {
    "op": _str, "nonce": _str, "kind": _str, "message": _str, "cause": _str,
    "violations": _list_of(_str, 1000),
    "seconds": _number, "launches": _int, "warmup_calls": _int,
    "kernels": _dict_of(_int), "ops": _dict_of(_int), "kernels_us": _dict_of(_number),
    "samples": _list_of(_number, 100_000), "synced": _list_of(_number, 100_000),
    "own_share": lambda v: v is None or _number(v),
    "cuda": _cuda,
    "tree": lambda v: isinstance(v, dict),
    "arena": lambda v: isinstance(v, dict) and _int(v.get("nbytes")) and v.get("fd") is True,
    "files": _list_of(lambda e: isinstance(e, dict), 100_000),
    "truncated": lambda v: isinstance(v, bool),
    "confined": _list_of(_str, 100),
    "boot": _dict_of(_number, 20),
    "installed": _int,
}


# the smallest arena a worker makes for a reply (tools/worker/worker.py `encode`)
ARENA_MIN_BYTES = 1 << 20
# what an announced arena may exceed that by: the driver rounds an allocation up to its granularity
# (tools/wire/cuda_vmm.py `rounded`: 2 MiB on an H100), and the worker announces the rounded size
ARENA_ROUNDING_BYTES = 32 << 20


def arena_limit(request: dict[str, Any]) -> int:
    """The most device memory a reply to `request` may announce: the arena the request allows
    (`arena_cap`, at least the worker's smallest), or the input arena it asked for (`bytes`). The
    parent maps what is announced, and its mapping keeps that memory alive until the parent lets
    it go, the worker's death notwithstanding: a candidate that announced all the card's free memory
    could make the parent's own next allocation fail (an attacker helper's design, stop 57, run on the CPU only)."""
    asked = [v for v in (request.get("arena_cap"), request.get("bytes")) if isinstance(v, int) and _int(v)]
    return max([ARENA_MIN_BYTES, *asked]) + ARENA_ROUNDING_BYTES


def check(header: dict[str, Any], announce_limit: int | None = None) -> dict[str, Any]:
    """The header, if every field the parent reads has the right type, and the device memory it
    announces is at most `announce_limit` bytes (`arena_limit` of its request); else MalformedReply."""
    for key, ok in FIELDS.items():
        if key in header and not ok(header[key]):
            raise MalformedReply(f"field {key!r} has the wrong type or value")
    if announce_limit is not None and "arena" in header and header["arena"]["nbytes"] > announce_limit:
        raise MalformedReply(f"field 'arena' announces {header['arena']['nbytes']} bytes of device memory, more "
                             f"than the request allows ({announce_limit})")
    return header
