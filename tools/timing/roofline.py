"""The roofline floor: the least time the hardware needs for a problem, and how close a kernel is.

floor = max(least bytes / copy bandwidth, flops / matrix rate). The least bytes, the flops and
the device's ceilings are counted and measured in the reference worker (tools/worker/cost.py);
here they become the floor, the record's Roofline, and the rule that a candidate measured
faster than the floor allows did not do the work.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

from tools.record import Roofline
from tools.worker.cost import dtype_key  # the reference worker describes a problem's dtype by this key

if TYPE_CHECKING:
    import torch

# A candidate measured faster than IMPOSSIBLE_SLACK * floor is impossible. The ceilings are
# measured with torch's own copy and cuBLAS, not the hardware's true peaks: a hand-written
# kernel may beat them by a few percent, and clocks and the ceilings' own measurement vary by
# a few percent (the byte and flop counts are lower bounds already). 10% covers those;
# the exploits this guards against (cached outputs, skipped work, work on another stream)
# show up as several times faster than the floor, not a few percent.
IMPOSSIBLE_SLACK = 0.9


@dataclass
class Ceilings:
    """Measured limits of one device."""

    device_name: str
    copy_bytes_per_s: float  # bytes read + written per second by a large device-to-device copy
    matmul_flops_per_s: dict[str, float] = field(default_factory=dict)  # by dtype_key; "tf32" too
    note: str = ""

    def rate(self, dtype: "torch.dtype | str", fp32_uses_tf32: bool = True) -> float:
        """Matrix rate for `dtype`.

        float32 takes the better of the IEEE and TF32 rates by default: Triton's tl.dot uses
        TF32 for fp32 inputs unless told otherwise, and the floor must stay a lower bound. A
        dtype not measured takes the fastest rate measured, for the same reason.
        """
        key = dtype_key(dtype)
        rates = self.matmul_flops_per_s
        if not rates:
            raise ValueError(f"no matrix rates measured on {self.device_name}")
        if key == "float32" and fp32_uses_tf32 and "tf32" in rates:
            return max(rates.get("float32", 0.0), rates["tf32"])
        return rates.get(key, max(rates.values()))

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "Ceilings":
        rates = {str(k): float(v) for k, v in dict(data["matmul_flops_per_s"]).items()}
        return cls(str(data["device_name"]), float(data["copy_bytes_per_s"]), rates, str(data.get("note", "")))


def floor_ms(bytes_moved: int, flops: int, dtype: "torch.dtype | str", ceilings: Ceilings) -> float:
    """The roofline floor in ms: max(bytes / bandwidth, flops / matrix rate)."""
    memory_s = bytes_moved / ceilings.copy_bytes_per_s
    compute_s = flops / ceilings.rate(dtype) if flops else 0.0
    return max(memory_s, compute_s) * 1e3


def achieved_fraction(floor: float, median_ms: float) -> float:
    """floor / measured median: 1.0 is at the hardware's limit."""
    if median_ms <= 0:
        raise ValueError(f"median must be positive, got {median_ms}")
    return floor / median_ms


def impossible(candidate_median_ms: float, floor: float, slack: float = IMPOSSIBLE_SLACK) -> bool:
    """True when the candidate is measured faster than the floor allows (below slack * floor)."""
    return candidate_median_ms < slack * floor


def build_roofline(
    bytes_moved: int,
    flops: int,
    dtype: "torch.dtype | str",
    ceilings: Ceilings,
    candidate_median_ms: float | None = None,
) -> Roofline:
    """The record's Roofline; the note says which bound sets the floor and what ceiling it used."""
    floor = floor_ms(bytes_moved, flops, dtype, ceilings)
    memory_ms = bytes_moved / ceilings.copy_bytes_per_s * 1e3
    compute = bool(flops) and floor > memory_ms
    if compute:
        bound = f"compute-bound ({dtype_key(dtype)} at {ceilings.rate(dtype) / 1e12:.1f} TFLOP/s)"
    else:
        bound = f"memory-bound (copy at {ceilings.copy_bytes_per_s / 1e9:.0f} GB/s)"
    if not flops:
        bound += "; flop counter saw no matrix ops"
    fraction = None
    if candidate_median_ms is not None and candidate_median_ms > 0:
        fraction = achieved_fraction(floor, candidate_median_ms)
    return Roofline(
        measured=True,
        bytes_moved=bytes_moved,
        flops=flops,
        floor_ms=floor,
        achieved_fraction=fraction,
        note=f"{bound} on {ceilings.device_name}",
        bound="compute" if compute else "memory",
    )
