"""What a problem costs at least, counted and measured in the reference worker (trusted: it runs no
candidate code): the least bytes a forward must move, its flops, its dominant dtype, and the
device's ceilings (a large device-to-device copy; large matrix products per dtype). The parent
turns them into the roofline floor (tools/timing/roofline.py).

- least bytes: every input, parameter/buffer and output tensor moved once (numel * element
  size; tensors sharing one storage counted once, never more than that storage's size);
- flops: torch's flop counter (torch.utils.flop_counter). It only knows matmul-, convolution-
  and attention-like ops; elementwise ops and reductions count 0, so for those problems the
  floor comes from the bytes alone. The floor is a lower bound either way;
- ceilings: measured once per device, not the datasheet's peaks.

The analysis runs as well under FakeTensorMode, so a problem with multi-GB inputs can be sized
without allocating them (`analyse_problem`).
"""
from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn
from torch.utils.flop_counter import FlopCounterMode


def _flatten(obj: Any) -> Iterator[Any]:
    if isinstance(obj, (list, tuple)):
        for item in obj:
            yield from _flatten(item)
    elif isinstance(obj, dict):
        for item in obj.values():
            yield from _flatten(item)
    else:
        yield obj


def module_tensors(module: nn.Module) -> list[torch.Tensor]:
    """A module's parameters and buffers, each shared one listed once."""
    return [*module.parameters(), *module.buffers()]


def least_bytes(inputs: Any, params: Iterable[torch.Tensor], outputs: Any) -> int:
    """Bytes that must move at least once: each input, parameter/buffer and output tensor.

    Each tensor counts numel * element_size, capped at its storage's size (an expanded
    tensor moves only its storage); tensors sharing a storage count once, as the largest of
    them (they may overlap, so more would overstate a lower bound). Non-tensors count 0.
    Nested lists, tuples and dicts are walked.
    """
    per_storage: dict[int, int] = {}
    for obj in _flatten([inputs, list(params), outputs]):
        if not isinstance(obj, torch.Tensor):
            continue
        storage = obj.untyped_storage()
        size = min(obj.numel() * obj.element_size(), storage.nbytes())
        key = storage._cdata  # identity of the storage: shared by views, also for fake tensors
        per_storage[key] = max(per_storage.get(key, 0), size)
    return sum(per_storage.values())


def count_flops(module: Callable[..., Any], inputs: Sequence[Any]) -> int:
    """FLOPs of one forward call by torch's flop counter (matmul/conv/attention ops only).

    Works with real tensors, and inside FakeTensorMode when the module and inputs were made
    under it. Runs without autograd.
    """
    with torch.no_grad(), FlopCounterMode(display=False) as counter:
        module(*inputs)
    return int(counter.get_total_flops())


def problem_dtype(tensors: Iterable[torch.Tensor]) -> torch.dtype:
    """The floating dtype holding the most bytes among `tensors` (float32 if none is floating)."""
    by_dtype: dict[torch.dtype, int] = {}
    for t in tensors:
        if isinstance(t, torch.Tensor) and t.is_floating_point():
            by_dtype[t.dtype] = by_dtype.get(t.dtype, 0) + t.numel() * t.element_size()
    return max(by_dtype, key=by_dtype.__getitem__) if by_dtype else torch.float32


@dataclass
class ProblemCost:
    bytes_moved: int
    flops: int
    dtype: torch.dtype


def analyse_problem(
    build_model: Callable[[], nn.Module], make_inputs: Callable[[], Sequence[Any]], fake: bool = True
) -> ProblemCost:
    """Least bytes, flops and dominant dtype of one forward of the problem.

    With fake=True the model, inputs and outputs are fake tensors (shapes and dtypes, no
    memory). Problems whose forward depends on tensor values (.item(), data-dependent shapes)
    raise FakeTensorMode's errors; analyse those with fake=False.
    """
    mode: contextlib.AbstractContextManager[Any] = contextlib.nullcontext()
    if fake:
        from torch._subclasses.fake_tensor import FakeTensorMode

        mode = FakeTensorMode()
    with mode:
        model = build_model()
        inputs = list(make_inputs())
        params = module_tensors(model)
        with torch.no_grad(), FlopCounterMode(display=False) as counter:
            outputs = model(*inputs)
        flops = int(counter.get_total_flops())
        tensors = [t for t in _flatten([inputs, params]) if isinstance(t, torch.Tensor)]
        return ProblemCost(least_bytes(inputs, params, outputs), flops, problem_dtype(tensors))


def dtype_key(dtype: torch.dtype | str) -> str:
    """The ceilings' key for a dtype: "float32", "float16", "bfloat16", ..."""
    return dtype if isinstance(dtype, str) else str(dtype).removeprefix("torch.")


# ----------------------------------------------------------------------------- measurement (GPU)


@contextlib.contextmanager
def _fp32_matmul_precision(tf32: bool) -> Iterator[None]:
    """Set TF32 for fp32 matmuls for the duration only, restoring the caller's setting."""
    matmul = torch.backends.cuda.matmul
    if hasattr(matmul, "fp32_precision"):  # torch >= 2.9; mixing with the legacy API raises
        saved_precision = matmul.fp32_precision
        matmul.fp32_precision = "tf32" if tf32 else "ieee"
        try:
            yield
        finally:
            matmul.fp32_precision = saved_precision
    else:
        saved_flag = matmul.allow_tf32
        matmul.allow_tf32 = tf32
        try:
            yield
        finally:
            matmul.allow_tf32 = saved_flag


def _best_ms(fn: Callable[[], Any], device: torch.device, reps: int) -> float:
    fn()  # warm-up (first cuBLAS call picks its kernel)
    torch.cuda.synchronize(device)
    best = float("inf")
    for _ in range(reps):
        start = torch.cuda.Event(enable_timing=True)
        end = torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        best = min(best, start.elapsed_time(end))
    return best


def measure_ceilings(
    device: torch.device | str = "cuda", copy_bytes: int = 1 << 30, matmul_n: int = 8192, reps: int = 5
) -> dict[str, Any]:
    """Measure the copy bandwidth and the matrix rates on a CUDA device (a few seconds): the fields
    of the parent's Ceilings (tools/timing/roofline.py).

    Copy: `copy_bytes` (capped at an eighth of free memory) copied device to device, best of
    `reps`; bandwidth counts the bytes read plus written. Matmul: `matmul_n` squared products in
    float32 (TF32 off), TF32, float16 and bfloat16, best of `reps`, on random data (never
    zeros). Global precision flags are restored on exit.
    """
    device = torch.device(device)
    if device.type != "cuda":
        raise ValueError(f"ceilings are measured on a CUDA device, not {device}")
    with torch.cuda.device(device):
        free, _total = torch.cuda.mem_get_info(device)
        nbytes = max(1 << 20, min(copy_bytes, free // 8))
        src = torch.randint(0, 256, (nbytes,), dtype=torch.uint8, device=device)
        dst = torch.empty_like(src)
        copy_ms = _best_ms(lambda: dst.copy_(src), device, reps)
        del src, dst
        rates: dict[str, float] = {}
        flops = 2 * matmul_n**3
        runs = (("float32", torch.float32, False), ("tf32", torch.float32, True),
                ("float16", torch.float16, False), ("bfloat16", torch.bfloat16, False))
        for key, dtype, tf32 in runs:
            a = torch.randn(matmul_n, matmul_n, device=device, dtype=dtype)
            b = torch.randn(matmul_n, matmul_n, device=device, dtype=dtype)
            out = torch.empty(matmul_n, matmul_n, device=device, dtype=dtype)
            with _fp32_matmul_precision(tf32):
                ms = _best_ms(lambda: torch.mm(a, b, out=out), device, reps)
            rates[key] = flops / (ms / 1e3)
            del a, b, out
        torch.cuda.empty_cache()
        return {
            "device_name": torch.cuda.get_device_name(device),
            "copy_bytes_per_s": 2 * nbytes / (copy_ms / 1e3),
            "matmul_flops_per_s": rates,
            "note": f"copy of {nbytes} bytes, {matmul_n}^2 matmuls, best of {reps}",
        }
