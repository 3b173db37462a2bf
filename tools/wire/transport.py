"""Moving output trees (tensors, tuples, scalars) from a worker to the parent without pickle.

A worker encodes a Python value into a JSON tree plus raw bytes. CPU tensors travel as raw
bytes in the frame's payload. CUDA tensors are copied (device to device) into the worker's
exchange arena: one buffer per worker, shared with the parent once as a file descriptor
(tools/wire/cuda_vmm.py, sent over the worker's Unix socket) and mapped there once, so multi-GB
outputs never leave the GPU and nothing depends on the sandbox's namespaces. The parent reads
views into the arena until its next request. It decodes only what this module defines, so a
hostile worker can send wrong data but cannot run code in the parent.
"""
from __future__ import annotations

import math
import os
from typing import Any

import torch

DTYPES: dict[str, torch.dtype] = {
    str(d).removeprefix("torch."): d
    for d in (
        torch.float64, torch.float32, torch.float16, torch.bfloat16, torch.complex64,
        torch.complex128, torch.int64, torch.int32, torch.int16, torch.int8, torch.uint8,
        torch.bool,
    )
}
for _name in ("float8_e4m3fn", "float8_e5m2"):
    if hasattr(torch, _name):
        DTYPES[_name] = getattr(torch, _name)


class TransportError(Exception):
    """The tree is malformed, or holds a value we do not transport."""


def dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


ALIGN = 256
MAX_DEPTH = 64  # nesting of output trees: a deeper one is forged, not an honest output
# a tensor's extents, empty dimensions counted as 1 (what its strides span): beyond this no honest
# output goes (its bytes must fit an arena), and torch cannot even make the strides of an empty one
MAX_SPAN = 1 << 48


class Arena:
    """A worker's side of an exchange buffer for CUDA tensors. `fd` (the allocation, to send to
    the parent) is closed by whoever sends it."""

    def __init__(self, device: torch.device, nbytes: int) -> None:
        from tools.wire.cuda_vmm import create

        self.buf, self.fd = create(device.index or 0, max(nbytes, ALIGN))
        self.descriptor = {"nbytes": self.buf.numel(), "fd": True}
        self.used = 0

    def put(self, t: torch.Tensor) -> list[int] | None:
        """Copy `t` (already laid out as it travels: see dense_order) into the arena."""
        flat = t.reshape(-1)
        n = flat.numel() * flat.element_size()
        offset = -(-self.used // ALIGN) * ALIGN
        if offset + n > self.buf.numel():
            return None
        if n:
            self.buf[offset:offset + n].copy_(flat.view(torch.uint8))
        self.used = offset + n
        return [offset, n]


def needed_bytes(value: Any) -> int:
    """Arena bytes to hold every CUDA tensor of `value`, aligned."""
    if isinstance(value, torch.Tensor):
        return -(-value.numel() * value.element_size() // ALIGN) * ALIGN + ALIGN
    if isinstance(value, (tuple, list)):
        return sum(needed_bytes(v) for v in value)
    return 0


def encode(value: Any, arena: Arena | None = None, hold: bool = False) -> tuple[dict[str, Any], bytes]:
    """Encode `value` as (tree, payload). CUDA tensors go into `arena`; one that does not fit
    is sent as metadata only ("overflow"), which the parent treats as a wrong output. With
    `hold`, no tensor's values are sent ("held"): a candidate's inputs after forward(), which the
    parent reads where it wrote them; the nodes still say where their storage lies (aliasing)."""
    payload = bytearray()
    if arena is not None:
        arena.used = 0

    def enc(v: Any) -> dict[str, Any]:
        if isinstance(v, torch.Tensor):
            node: dict[str, Any] = {
                "t": "tensor",
                "type": f"{type(v).__module__}.{type(v).__qualname__}",
                "plain": type(v) is torch.Tensor,
                "dtype": dtype_name(v.dtype),
                "shape": list(v.shape),
                "device": str(v.device),
            }
            if not node["plain"]:
                return node  # never read a subclass: its methods are the candidate's code
            node["ptr"] = [v.untyped_storage().data_ptr(), v.untyped_storage().nbytes()]  # the storage it really shares
            if hold:
                node["held"] = True
                return node
            t = v.detach().resolve_conj().resolve_neg()  # lazy conj/neg bits: the values, not the storage
            perm = dense_order(t)
            if perm is not None:  # dense in another order (channels_last, a transpose): keep the strides
                node["perm"] = perm
                t = t.permute(perm)
            t = t.contiguous()
            if t.device.type == "cuda":
                where = arena.put(t) if arena is not None else None
                if where is None:
                    node["overflow"] = True
                else:
                    node["arena"] = where
            else:
                flat = t.reshape(-1)
                raw = flat.view(torch.uint8) if flat.numel() else flat
                data = raw.numpy().tobytes() if flat.numel() else b""
                node["bytes"] = [len(payload), len(data)]
                payload.extend(data)
            return node
        if isinstance(v, (tuple, list)):
            return {"t": type(v).__name__, "items": [enc(x) for x in v]}
        if v is None:
            return {"t": "none"}
        if isinstance(v, bool):
            return {"t": "scalar", "kind": "bool", "value": v}
        if isinstance(v, int):
            return {"t": "scalar", "kind": "int", "value": v}
        if isinstance(v, float):
            return {"t": "scalar", "kind": "float", "value": repr(v)}
        if isinstance(v, str):
            return {"t": "scalar", "kind": "str", "value": v}
        if isinstance(v, torch.dtype) and dtype_name(v) in DTYPES:
            return {"t": "scalar", "kind": "dtype", "value": dtype_name(v)}
        return {"t": "other", "type": f"{type(v).__module__}.{type(v).__qualname__}"}

    return enc(value), bytes(payload)


def open_arena(descriptor: dict[str, Any], fd: int, device: int) -> torch.Tensor:
    """The parent's mapping of a worker's arena (a flat uint8 CUDA tensor), from the allocation
    the worker sent as `fd` (closed here)."""
    from tools.wire.cuda_vmm import VmmError, import_fd

    n = descriptor.get("nbytes")
    if not isinstance(n, int) or n <= 0:
        os.close(fd)
        raise TransportError("bad arena size")
    try:
        return import_fd(device, fd, n)
    except (VmmError, OSError) as exc:
        raise TransportError(f"the worker's memory could not be mapped ({exc})") from None


def decode(tree: dict[str, Any], payload: bytes, arena: torch.Tensor | None = None) -> Any:
    """Rebuild the value tree in the parent: CPU tensors are copies, CUDA tensors are views
    into `arena`, valid until the worker's next request. Raises TransportError on anything
    unexpected."""
    buf = bytearray(payload)

    def dec(node: Any, depth: int = 0) -> Any:
        if not isinstance(node, dict):
            raise TransportError("tree node is not an object")
        if depth > MAX_DEPTH:
            raise TransportError(f"a tree nested deeper than {MAX_DEPTH}")
        kind = node.get("t")
        if kind == "tensor":
            return _decode_tensor(node, buf, arena)
        if kind in ("tuple", "list"):
            items = [dec(x, depth + 1) for x in _as_list(node.get("items"))]
            return tuple(items) if kind == "tuple" else items
        if kind == "none":
            return None
        if kind == "scalar":
            value = node.get("value")
            if node.get("kind") == "float":
                if not isinstance(value, str):  # encode() sends repr(v); an int beyond any float
                    raise TransportError("bad float scalar")  # made float() raise OverflowError
                try:
                    return float(value)
                except ValueError:
                    raise TransportError("bad float scalar") from None
            if node.get("kind") == "int" and isinstance(value, int) and not isinstance(value, bool):
                return value
            if node.get("kind") == "bool" and isinstance(value, bool):
                return value
            if node.get("kind") == "str" and isinstance(value, str):
                return value
            if node.get("kind") == "dtype" and value in DTYPES:
                return DTYPES[value]
            raise TransportError("bad scalar")
        if kind == "other":
            return Unsupported(str(node.get("type")))
        raise TransportError(f"unknown node kind {kind!r}")

    return dec(tree)


class Unsupported:
    """Stands for an output value of a type we do not compare (a dict, a custom object)."""

    def __init__(self, type_name: str) -> None:
        self.type_name = type_name

    def __repr__(self) -> str:
        return f"<{self.type_name}>"


class Opaque:
    """Stands for a tensor we refused or could not read: a subclass of torch.Tensor, or one too
    large for the arena."""

    def __init__(self, node: dict[str, Any]) -> None:
        big = f"tensor of shape {node.get('shape')}, larger than the reference's outputs"
        self.type_name = big if node.get("overflow") else str(node.get("type"))
        self.shape = node.get("shape")
        self.dtype = node.get("dtype")


def _as_list(v: Any) -> list[Any]:
    if not isinstance(v, list):
        raise TransportError("items is not a list")
    return v


def dense_order(t: torch.Tensor) -> list[int] | None:
    """The dimension order in which a non-contiguous tensor is dense (its strides sorted), or
    None for a contiguous one or one that is not dense in any order (expanded, sliced)."""
    if t.is_contiguous() or t.dim() < 2:
        return None
    strides = t.stride()
    perm = sorted(range(t.dim()), key=lambda d: (-strides[d], d))
    permuted = t.permute(perm)
    return perm if permuted.is_contiguous() else None


def _decode_tensor(node: dict[str, Any], buf: bytearray, arena: torch.Tensor | None) -> Any:
    if not node.get("plain") or node.get("overflow"):
        return Opaque(node)
    if node.get("held"):
        raise TransportError("a tensor whose values were not sent")
    dtype = DTYPES.get(str(node.get("dtype")))
    shape = node.get("shape")
    if (dtype is None or not isinstance(shape, list)
            or not all(isinstance(s, int) and not isinstance(s, bool) and s >= 0 for s in shape)
            or math.prod(max(s, 1) for s in shape) > MAX_SPAN):
        raise TransportError("bad tensor dtype or shape")
    perm = node.get("perm")
    if perm is not None:
        if not isinstance(perm, list) or sorted(perm) != list(range(len(shape))):
            raise TransportError("bad dimension order")
        flat = _decode_flat({**node, "shape": [shape[d] for d in perm], "perm": None}, buf, arena, dtype)
        inverse = sorted(range(len(perm)), key=lambda d: perm[d])
        return flat.permute(inverse)
    return _decode_flat(node, buf, arena, dtype)


def _decode_flat(node: dict[str, Any], buf: bytearray, arena: torch.Tensor | None, dtype: torch.dtype) -> Any:
    shape = node["shape"]
    numel = 1
    for s in shape:
        numel *= s
    itemsize = torch.empty((), dtype=dtype).element_size()
    if "arena" in node:
        start, length = node["arena"]
        if arena is None or length != numel * itemsize or start < 0 or start + length > arena.numel():
            raise TransportError("tensor does not lie within the arena")
        if numel == 0:
            return torch.empty(shape, dtype=dtype, device=arena.device)
        return arena[start:start + length].view(dtype).reshape(shape)
    start, length = node.get("bytes", [0, 0])
    if length != numel * itemsize or start < 0 or start + length > len(buf):
        raise TransportError("tensor bytes do not match its shape")
    if numel == 0:
        return torch.empty(shape, dtype=dtype)
    raw = torch.frombuffer(buf, dtype=torch.uint8, count=length, offset=start)
    return raw.view(dtype).reshape(shape).clone()


def tensor_nodes(tree: dict[str, Any]) -> list[dict[str, Any]]:
    """All tensor nodes of a tree, depth first (for aliasing and type checks)."""
    out: list[dict[str, Any]] = []

    def walk(node: Any, depth: int) -> None:
        if depth > MAX_DEPTH:
            raise TransportError(f"a tree nested deeper than {MAX_DEPTH}")
        if isinstance(node, dict):
            if node.get("t") == "tensor":
                out.append(node)
            for item in node.get("items", []) if isinstance(node.get("items"), list) else []:
                walk(item, depth + 1)

    walk(tree, 0)
    return out
