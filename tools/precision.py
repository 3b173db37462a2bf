"""The run's precision setting: which float32 arithmetic the baselines and every worker use, or
which half type the problem runs in.

`fp32` (the default): float32 matrix products and convolutions in IEEE float32 arithmetic, in the
reference's worker (eager and torch.compile are timed so) and in the candidate's (the torch ops
it keeps). PyTorch's own default runs float32 convolutions on TF32 tensor cores
(`torch.backends.cudnn.allow_tf32`), so without this setting a float32 convolution's eager time
is a TF32 time, and a kernel that keeps float32 accuracy (IEEE or 3xTF32 dots) is compared with
a less accurate baseline.

`tf32`: TF32 tensor cores admitted for float32 products and convolutions, in both workers, so
that a kernel with TF32 dots is compared with baselines that use them too.

`bf16`, `fp16`: the problem in half precision, as a model runs in it: every floating parameter,
buffer and input is cast to bfloat16 or float16 in both workers (tools/worker/precision.py), so
eager, torch.compile and the candidate all run on half-precision tensors. Outputs are judged
against the reference evaluated in float64 (the half values widened exactly) with eager's own
error in that type as the yardstick (tools/judge/exact.py, docs/precision.md).
"""
from __future__ import annotations

from tools.worker.precision import HALF, TF32

PRECISIONS = (*TF32, *HALF)  # ("fp32", "tf32", "bf16", "fp16"): applied in each worker by tools/worker/precision.py


class PrecisionError(ValueError):
    """A precision this evaluator does not have; str() is one line."""


def check(precision: str) -> str:
    """`precision` when it is one of PRECISIONS, else PrecisionError naming what there is."""
    if precision in PRECISIONS:
        return precision
    raise PrecisionError(f"precision {precision!r} is not one of {', '.join(PRECISIONS)}")


def dot_precision(precision: str) -> tuple[str, ...]:
    """The `tl.dot` input precisions a float32 kernel may use under `precision`, the fastest first:
    under `fp32` three TF32 products (about float32's accuracy) or IEEE; under `tf32` TF32 too."""
    return ("tf32", "tf32x3", "ieee") if check(precision) == "tf32" else ("tf32x3", "ieee")
