"""Framed messages between the trusted parent and its worker processes.

A frame is a 4-byte big-endian header length, a JSON header, and, when the header says
`payload_bytes`, that many raw bytes. No pickle: what a candidate worker sends is untrusted,
so the parent only ever parses JSON and raw tensor bytes.
"""
from __future__ import annotations

import json
import math
import os
import select
import struct
import time
from typing import Any

MAX_HEADER = 16 << 20  # a header larger than this is a forged or broken frame


class ProtocolError(Exception):
    """The peer sent something that is not a frame, or went away."""


class PeerClosed(ProtocolError):
    """The peer closed its end (usually: the worker process died)."""


class Deadline(Exception):
    """No complete frame arrived before the deadline."""


def write_frame(fd: int, header: dict[str, Any], payload: bytes | memoryview = b"", deadline: float | None = None) -> None:
    """Write one frame. With a deadline (time.monotonic()), `fd` must be non-blocking: a peer that
    stops reading cannot hold the writer past it (Deadline)."""
    if payload:
        header = {**header, "payload_bytes": len(payload)}
    data = json.dumps(header).encode()
    _write_all(fd, struct.pack(">I", len(data)) + data, deadline)
    if payload:
        _write_all(fd, payload, deadline)


def _write_all(fd: int, data: bytes | memoryview, deadline: float | None = None) -> None:
    view = memoryview(data)
    while view:
        if deadline is not None:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([], [fd], [], left)[1]:
                raise Deadline()
        try:
            n = os.write(fd, view)
        except BlockingIOError:
            continue
        view = view[n:]


MAX_INT_DIGITS = 30  # no field of a reply needs more; a longer integer is a forgery (and slow to parse)


def _no_constant(name: str) -> Any:
    """NaN and Infinity have no place in a reply: every number in one is a size, an offset, a count
    or a time, and a non-finite one reached the parent's arithmetic (an arena offset of Infinity
    raised an OverflowError there, an evaluator `error`)."""
    raise ValueError(f"a non-finite number ({name}) in a reply")


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"a number out of range ({text[:40]}) in a reply")
    return value


def _bounded_int(text: str) -> int:
    if len(text.lstrip("-")) > MAX_INT_DIGITS:
        raise ValueError(f"an integer of {len(text)} digits in a reply")
    return int(text)


class FrameReader:
    """Reads frames from a pipe, with an optional deadline and a hook run while waiting."""

    def __init__(self, fd: int) -> None:
        self.fd = fd

    def read(self, deadline: float | None = None, on_wait=None, max_payload: int | None = None) -> tuple[dict[str, Any], bytes]:
        """One frame; a payload over `max_payload` bytes is refused before any of it is read."""
        (size,) = struct.unpack(">I", self._read_exact(4, deadline, on_wait))
        if size > MAX_HEADER:
            raise ProtocolError(f"frame header of {size} bytes")
        try:
            header = json.loads(self._read_exact(size, deadline, on_wait), parse_constant=_no_constant,
                                parse_float=_finite_float, parse_int=_bounded_int)
        except (UnicodeDecodeError, ValueError, RecursionError) as exc:  # JSONDecodeError is a ValueError
            raise ProtocolError(f"frame header is not JSON: {str(exc)[:200]}") from None
        if not isinstance(header, dict):
            raise ProtocolError("frame header is not a JSON object")
        payload = b""
        n = header.get("payload_bytes", 0)
        if not isinstance(n, int) or isinstance(n, bool) or n < 0:
            raise ProtocolError("bad payload_bytes")
        if max_payload is not None and n > max_payload:
            raise ProtocolError(f"a reply of {n} bytes, more than the {max_payload} this request allows")
        if n:
            payload = self._read_exact(n, deadline, on_wait)
        return header, payload

    def _read_exact(self, n: int, deadline: float | None, on_wait) -> bytes:
        chunks: list[bytes] = []
        while n:
            if deadline is not None:
                while True:
                    left = deadline - time.monotonic()
                    if left <= 0:
                        raise Deadline()
                    ready, _, _ = select.select([self.fd], [], [], min(left, 0.25))
                    if ready:
                        break
                    if on_wait is not None:
                        on_wait()
            chunk = os.read(self.fd, min(n, 1 << 24))
            if not chunk:
                raise PeerClosed("peer closed the pipe")
            chunks.append(chunk)
            n -= len(chunk)
        return b"".join(chunks)
