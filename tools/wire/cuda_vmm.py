"""Device memory shared between processes as file descriptors (the CUDA driver's virtual memory
management API, through ctypes), for the exchange arenas of tools/wire/transport.py.

A worker creates an allocation that can be exported as a POSIX file descriptor, maps it into its
own address space, and sends the descriptor to the parent over a Unix socket (SCM_RIGHTS); the
parent imports it and maps it into its own. Nothing in it depends on process ids or namespaces,
so it works from inside the OS sandbox (legacy CUDA IPC handles do not: the opener resolves the
exporter's pid, which a pid namespace changes). The parent trusts nothing of the worker's: it
maps at most the size it asked for, and a descriptor that is not such an allocation fails to
import.

Both sides see the memory as a flat uint8 torch tensor, made through `__cuda_array_interface__`;
the mapping is released when the last tensor on it is gone.
"""
from __future__ import annotations

import ctypes
import functools
import os
import threading
from typing import Any

HANDLE_POSIX_FD = 1  # CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR
ALLOCATION_PINNED = 1  # CU_MEM_ALLOCATION_TYPE_PINNED (device memory)
LOCATION_DEVICE = 1  # CU_MEM_LOCATION_TYPE_DEVICE
READ_WRITE = 3  # CU_MEM_ACCESS_FLAGS_PROT_READWRITE


class VmmError(RuntimeError):
    """A driver call failed; str() names the call and the CUDA error."""


class _Location(ctypes.Structure):
    _fields_ = [("type", ctypes.c_int), ("id", ctypes.c_int)]


class _AllocFlags(ctypes.Structure):
    _fields_ = [("compressionType", ctypes.c_ubyte), ("gpuDirectRDMACapable", ctypes.c_ubyte),
                ("usage", ctypes.c_ushort), ("reserved", ctypes.c_ubyte * 4)]


class _Prop(ctypes.Structure):
    _fields_ = [("type", ctypes.c_int), ("requestedHandleTypes", ctypes.c_int), ("location", _Location),
                ("win32HandleMetaData", ctypes.c_void_p), ("allocFlags", _AllocFlags)]


class _Access(ctypes.Structure):
    _fields_ = [("location", _Location), ("flags", ctypes.c_int)]


@functools.lru_cache(maxsize=1)
def _lib() -> ctypes.CDLL:
    lib = ctypes.CDLL("libcuda.so.1")
    u64, size = ctypes.c_uint64, ctypes.c_size_t
    sig = {
        "cuInit": [ctypes.c_uint], "cuDeviceGet": [ctypes.POINTER(ctypes.c_int), ctypes.c_int],
        "cuDevicePrimaryCtxRetain": [ctypes.POINTER(ctypes.c_void_p), ctypes.c_int],
        "cuCtxSetCurrent": [ctypes.c_void_p],
        "cuMemGetAllocationGranularity": [ctypes.POINTER(size), ctypes.POINTER(_Prop), ctypes.c_int],
        "cuMemCreate": [ctypes.POINTER(u64), size, ctypes.POINTER(_Prop), u64],
        "cuMemAddressReserve": [ctypes.POINTER(u64), size, size, u64, u64],
        "cuMemMap": [u64, size, size, u64, u64],
        "cuMemSetAccess": [u64, size, ctypes.POINTER(_Access), size],
        "cuMemExportToShareableHandle": [ctypes.c_void_p, u64, ctypes.c_int, u64],
        "cuMemImportFromShareableHandle": [ctypes.POINTER(u64), ctypes.c_void_p, ctypes.c_int],
        "cuMemUnmap": [u64, size], "cuMemAddressFree": [u64, size], "cuMemRelease": [u64],
    }
    for name, args in sig.items():
        fn = getattr(lib, name)
        fn.argtypes, fn.restype = args, ctypes.c_int
    return lib


def _check(rc: int, call: str) -> None:
    if rc != 0:
        raise VmmError(f"{call} failed (CUDA error {rc})")


_contexts: dict[int, ctypes.c_void_p] = {}
_lock = threading.Lock()


def _current(device: int) -> ctypes.CDLL:
    """The driver, with the device's primary context (the one torch uses) current on this thread."""
    lib = _lib()
    with _lock:
        if device not in _contexts:
            _check(lib.cuInit(0), "cuInit")
            dev = ctypes.c_int()
            _check(lib.cuDeviceGet(ctypes.byref(dev), device), "cuDeviceGet")
            ctx = ctypes.c_void_p()
            _check(lib.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), dev), "cuDevicePrimaryCtxRetain")
            _contexts[device] = ctx
    _check(lib.cuCtxSetCurrent(_contexts[device]), "cuCtxSetCurrent")
    return lib


def _prop(device: int) -> _Prop:
    prop = _Prop()
    prop.type, prop.requestedHandleTypes = ALLOCATION_PINNED, HANDLE_POSIX_FD
    prop.location = _Location(LOCATION_DEVICE, device)
    return prop


def rounded(nbytes: int, device: int) -> int:
    lib = _current(device)
    granularity = ctypes.c_size_t()
    _check(lib.cuMemGetAllocationGranularity(ctypes.byref(granularity), ctypes.byref(_prop(device)), 0),
           "cuMemGetAllocationGranularity")
    g = granularity.value
    return max(g, -(-nbytes // g) * g)


class Mapping:
    """A mapping of one shareable allocation into this process, released when the last tensor
    made on it (`tensor()`) is freed: only those tensors hold a reference to it."""

    def __init__(self, device: int, handle: int, nbytes: int) -> None:
        lib = _current(device)
        self.device, self.handle, self.nbytes = device, handle, nbytes
        self.ptr: ctypes.c_uint64 | None = ctypes.c_uint64()
        _check(lib.cuMemAddressReserve(ctypes.byref(self.ptr), nbytes, 0, 0, 0), "cuMemAddressReserve")
        try:
            _check(lib.cuMemMap(self.ptr, nbytes, 0, handle, 0), "cuMemMap")
            access = _Access(_Location(LOCATION_DEVICE, device), READ_WRITE)
            _check(lib.cuMemSetAccess(self.ptr, nbytes, ctypes.byref(access), 1), "cuMemSetAccess")
        except VmmError:
            lib.cuMemUnmap(self.ptr, nbytes)
            lib.cuMemAddressFree(self.ptr, nbytes)
            self.ptr = None
            raise

    @property
    def __cuda_array_interface__(self) -> dict[str, Any]:
        assert self.ptr is not None, "mapped"
        return {"shape": (self.nbytes,), "typestr": "|u1", "data": (self.ptr.value, False), "version": 3,
                "strides": None}

    def tensor(self) -> Any:
        import torch

        return torch.as_tensor(self, device=f"cuda:{self.device}")

    def __del__(self) -> None:  # the last tensor on the mapping is gone
        if self.ptr is None:
            return
        try:
            lib = _current(self.device)
            lib.cuMemUnmap(self.ptr, self.nbytes)
            lib.cuMemAddressFree(self.ptr, self.nbytes)
            lib.cuMemRelease(self.handle)
        except (VmmError, OSError):
            pass  # finalizing at exit, the driver already gone: the process's memory goes with it
        self.ptr = None


def create(device: int, nbytes: int) -> tuple[Any, int]:
    """A new shareable allocation of at least `nbytes`: (a uint8 tensor on it, a file descriptor
    to send to the parent; the caller closes it once sent)."""
    lib = _current(device)
    size = rounded(nbytes, device)
    handle = ctypes.c_uint64()
    _check(lib.cuMemCreate(ctypes.byref(handle), size, ctypes.byref(_prop(device)), 0), "cuMemCreate")
    fd = ctypes.c_int(-1)
    try:
        _check(lib.cuMemExportToShareableHandle(ctypes.byref(fd), handle, HANDLE_POSIX_FD, 0),
               "cuMemExportToShareableHandle")
        mapping = Mapping(device, handle.value, size)
    except VmmError:
        lib.cuMemRelease(handle)
        if fd.value >= 0:
            os.close(fd.value)
        raise
    return mapping.tensor(), fd.value


def import_fd(device: int, fd: int, nbytes: int) -> Any:
    """Map an allocation a worker sent as `fd` (closed here); a uint8 tensor of `nbytes`."""
    handle = ctypes.c_uint64()
    try:
        lib = _current(device)
        _check(lib.cuMemImportFromShareableHandle(ctypes.byref(handle), ctypes.c_void_p(fd), HANDLE_POSIX_FD),
               "cuMemImportFromShareableHandle")
    finally:
        os.close(fd)
    try:
        return Mapping(device, handle.value, rounded(nbytes, device)).tensor()[:nbytes]
    except VmmError:
        lib.cuMemRelease(handle)
        raise
