"""The run's precision applied in a worker, before any model exists: which float32 arithmetic its
products and convolutions use. The parent chose and checked the setting (tools/precision.py
reads its names from here: one table for both sides)."""
from __future__ import annotations

TF32 = {"fp32": False, "tf32": True}  # precision -> TF32 tensor cores admitted for float32 products and convolutions


def apply(precision: str) -> None:
    """Set this process's float32 product and convolution arithmetic for `precision`.

    Through the flags every torch version has (`allow_tf32`): torch >= 2.9 also has a newer API
    (`fp32_precision`), and reading the old flags after setting only the new one raises; set
    through the old flags, both read consistently (tools/worker/cost.py's ceiling measurement sets
    and restores the new one)."""
    import torch

    if precision not in TF32:
        raise ValueError(f"precision {precision!r} is not one of {', '.join(TF32)}")
    torch.backends.cuda.matmul.allow_tf32 = TF32[precision]
    torch.backends.cudnn.allow_tf32 = TF32[precision]
