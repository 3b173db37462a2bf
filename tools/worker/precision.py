"""The run's precision applied in a worker, before any model exists: which float32 arithmetic its
products and convolutions use, and, under a half precision, the dtype every floating parameter,
buffer and input is cast to (tools/worker/worker.py `construct`, tools/worker/inputs.py
`generate`). The parent chose and checked the setting (tools/precision.py reads its names from
here: one table for both sides)."""
from __future__ import annotations

from typing import Any

TF32 = {"fp32": False, "tf32": True}  # precision -> TF32 tensor cores admitted for float32 products and convolutions
HALF = {"bf16": "bfloat16", "fp16": "float16"}  # precision -> the dtype a problem's floating tensors are cast to


def half_dtype(precision: str) -> Any:
    """The torch dtype `precision` casts a problem to, or None (fp32, tf32: the problem's own)."""
    import torch

    return getattr(torch, HALF[precision]) if precision in HALF else None


def cast_floating(value: Any, dtype: Any) -> Any:
    """`value` in `dtype` when it is a floating tensor, else as it is (an input under a half precision)."""
    import torch

    return value.to(dtype) if isinstance(value, torch.Tensor) and value.is_floating_point() else value


def apply(precision: str) -> None:
    """Set this process's float32 product and convolution arithmetic for `precision`.

    Through the flags every torch version has (`allow_tf32`): torch >= 2.9 also has a newer API
    (`fp32_precision`), and reading the old flags after setting only the new one raises; set
    through the old flags, both read consistently (tools/worker/cost.py's ceiling measurement sets
    and restores the new one)."""
    import torch

    if precision not in TF32 and precision not in HALF:
        raise ValueError(f"precision {precision!r} is not one of {', '.join([*TF32, *HALF])}")
    tf32 = TF32.get(precision, False)  # a half-precision problem's float32 parts, if any, in IEEE
    torch.backends.cuda.matmul.allow_tf32 = tf32
    torch.backends.cudnn.allow_tf32 = tf32
