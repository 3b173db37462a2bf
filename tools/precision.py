"""The run's precision setting: which float32 arithmetic the baselines and every worker use.

`fp32` (the default): float32 matrix products and convolutions in IEEE float32 arithmetic, in the
reference's worker (eager and torch.compile are timed so) and in the candidate's (the torch ops
it keeps). PyTorch's own default runs float32 convolutions on TF32 tensor cores
(`torch.backends.cudnn.allow_tf32`), so without this setting a float32 convolution's eager time
is a TF32 time, and a kernel that keeps float32 accuracy (IEEE or 3xTF32 dots) is compared with
a less accurate baseline.

`tf32`: TF32 tensor cores admitted for float32 products and convolutions, in both workers, so
that a kernel with TF32 dots is compared with baselines that use them too.

What the setting does not do yet (docs/precision.md): it does not tighten the accuracy bound. The
float32 tolerance (tools/judge/compare.py) admits a TF32 dot under either setting; judging `fp32`
against a float64 evaluation of the reference is not built. `bf16` and `fp16` (inputs and
parameters cast, as KernelBench's precision option does) are not built either, and are refused
with a message that says so.
"""
from __future__ import annotations

from tools.worker.precision import TF32

PRECISIONS = tuple(TF32)  # ("fp32", "tf32"): applied in each worker by tools/worker/precision.py
NOT_BUILT = ("bf16", "fp16")


class PrecisionError(ValueError):
    """A precision this evaluator does not have; str() is one line."""


def check(precision: str) -> str:
    """`precision` when it is one of PRECISIONS, else PrecisionError naming what there is."""
    if precision in PRECISIONS:
        return precision
    if precision in NOT_BUILT:
        raise PrecisionError(f"precision {precision!r} is not built yet (inputs and parameters cast to it); "
                             f"use one of {', '.join(PRECISIONS)} (docs/precision.md)")
    raise PrecisionError(f"precision {precision!r} is not one of {', '.join(PRECISIONS)}")


def dot_precision(precision: str) -> tuple[str, ...]:
    """The `tl.dot` input precisions a float32 kernel may use under `precision`, the fastest first:
    under `fp32` three TF32 products (about float32's accuracy) or IEEE; under `tf32` TF32 too."""
    return ("tf32", "tf32x3", "ieee") if check(precision) == "tf32" else ("tf32x3", "ieee")
