"""Stream memory operations (the CUDA driver's cuStreamWaitValue32 / cuStreamWriteValue32, through
ctypes) on device memory that two processes map (tools/wire/cuda_vmm.py): a GPU-side handshake
between the parent's stream and a worker's, with no host in between.

The parent's timed pass (tools/timing/gate.py) uses two words of a small allocation the worker
exports: the parent's stream writes the pass number into GATE once the pass's inputs are in
place, and the worker's stream waits for it before its first call; the worker's stream writes the
number into DONE after its last output is handed over, and the parent's stream waits for that
before it stops its clock. Both sides enqueue ahead; the GPU resolves the order.
"""
from __future__ import annotations

import ctypes
import functools
from typing import Any

GATE_OFFSET = 0  # byte offsets of the two 32-bit words in the worker's gate allocation
DONE_OFFSET = 128
GATE_BYTES = 256


@functools.lru_cache(maxsize=1)
def _ops() -> tuple[Any, Any]:
    from tools.wire.cuda_vmm import _lib

    lib = _lib()
    fns = []
    for name in ("cuStreamWaitValue32_v2", "cuStreamWriteValue32_v2"):
        fn = getattr(lib, name)
        fn.argtypes, fn.restype = [ctypes.c_void_p, ctypes.c_uint64, ctypes.c_uint32, ctypes.c_uint], ctypes.c_int
        fns.append(fn)
    return fns[0], fns[1]


def _call(fn: Any, stream: Any, addr: int, value: int, what: str) -> None:
    from tools.wire.cuda_vmm import VmmError, _current

    _current(stream.device.index or 0)  # the primary context, current on this thread
    rc = fn(ctypes.c_void_p(stream.cuda_stream), ctypes.c_uint64(addr), ctypes.c_uint32(value & 0xFFFFFFFF), 0)
    if rc != 0:
        raise VmmError(f"{what} failed (CUDA error {rc})")


def wait_value(stream: Any, addr: int, value: int) -> None:
    """Work queued on `stream` after this waits until the word at `addr` is at least `value`
    (cyclic comparison of 32-bit words)."""
    _call(_ops()[0], stream, addr, value, "cuStreamWaitValue32")


def write_value(stream: Any, addr: int, value: int) -> None:
    """Write `value` into the word at `addr` once the work queued before it on `stream` is done
    (with a memory barrier: that work's writes are visible first)."""
    _call(_ops()[1], stream, addr, value, "cuStreamWriteValue32")
