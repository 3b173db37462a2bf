"""What correctness means for one candidate output tree against the reference's (the first difference,
and the error sizes); the trials turn a difference into a Failure (tools/judge/trial_checks.py).

Per output: plain torch.Tensor type, exact shape and dtype, the same device type, the same
NaN/+Inf/-Inf pattern, then on the finite elements an elementwise bound
    |a - b| <= atol * scale + rtol * |b|,   scale = RMS of the reference output (1 if it is 0)
and a whole-tensor bound ||a - b|| / ||b|| <= norm_rtol. Integer and bool outputs must match
exactly. Tolerances per dtype are in TOLERANCES (documented in docs/evaluator.md) and can be overridden.
Large tensors are compared in chunks so the comparison never needs more than a slice of memory.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, cast

import torch

from tools.wire.transport import Opaque, Unsupported


@dataclass(frozen=True)
class Tolerance:
    rtol: float
    atol: float  # times the reference's RMS
    norm_rtol: float


TOLERANCES: dict[torch.dtype, Tolerance] = {
    torch.float64: Tolerance(1e-7, 1e-7, 1e-8),
    torch.float32: Tolerance(1e-2, 1e-2, 2e-3),  # admits TF32 tensor-core dots inside a kernel
    torch.float16: Tolerance(1e-2, 1e-2, 5e-3),
    torch.bfloat16: Tolerance(2e-2, 2e-2, 1.5e-2),
    torch.complex64: Tolerance(1e-2, 1e-2, 2e-3),
    torch.complex128: Tolerance(1e-7, 1e-7, 1e-8),
}
FP8 = Tolerance(1.25e-1, 1.25e-1, 6e-2)
CHUNK = 1 << 26  # elements per comparison slice


@dataclass
class Mismatch:
    check: str  # output-type (a Tensor subclass: rejected), output-kind, output-structure, shape, dtype, nan-pattern, values, ...
    message: str


@dataclass
class Stats:
    max_abs: float = 0.0
    max_rel: float = 0.0
    norm_rel: float = 0.0


def tolerance_for(dtype: torch.dtype, overrides: dict[str, Tolerance] | None = None) -> Tolerance:
    name = str(dtype).removeprefix("torch.")
    if overrides and name in overrides:
        return overrides[name]
    return TOLERANCES.get(dtype, FP8)


def compare_trees(ref: Any, cand: Any, stats: Stats, overrides: dict[str, Tolerance] | None = None,
                  path: str = "output", values_from: int | None = None) -> Mismatch | None:
    """First difference between two output trees, or None. Updates stats with error sizes. With
    `values_from`, a floating tensor of that many elements or more is checked for its structure
    and its NaN/Inf pattern only: its values are judged elsewhere (against float64: a stress
    trial, where eager float32 is a yardstick, not the truth; tools/judge/trials.py)."""
    if isinstance(cand, Opaque):
        return Mismatch("output-type", f"{path} is a {cand.type_name}; outputs must be plain torch.Tensor")
    if isinstance(cand, Unsupported):
        return Mismatch("output-kind", f"{path} is a {cand.type_name}; expected {_kind(ref)}")
    if isinstance(ref, torch.Tensor):
        if not isinstance(cand, torch.Tensor):
            return Mismatch("output-kind", f"{path} is {_kind(cand)}; expected a tensor")
        return compare_tensors(ref, cand, stats, overrides, path, values_from)
    if isinstance(ref, (tuple, list)):
        if not isinstance(cand, (tuple, list)) or len(cand) != len(ref):
            return Mismatch("output-structure", f"{path} is {_kind(cand)}; expected a {type(ref).__name__} of {len(ref)}")
        for i, (r, c) in enumerate(zip(ref, cand)):
            found = compare_trees(r, c, stats, overrides, f"{path}[{i}]", values_from)
            if found:
                return found
        return None
    if isinstance(ref, (int, float, bool)) or ref is None:
        if type(cand) is not type(ref):
            return Mismatch("output-kind", f"{path} is {_kind(cand)}; expected {_kind(ref)}")
        if isinstance(ref, float) and not math.isclose(ref, cast(float, cand), rel_tol=1e-5, abs_tol=1e-6) \
                and not (math.isnan(ref) and math.isnan(cast(float, cand))):  # cand: a float too (its type is ref's)
            return Mismatch("values", f"{path} is {cand!r}; expected {ref!r}")
        if not isinstance(ref, float) and ref != cand:
            return Mismatch("values", f"{path} is {cand!r}; expected {ref!r}")
        return None
    return Mismatch("output-type", f"the reference's {path} is {_kind(ref)}, which ratchet cannot compare")


def _kind(v: Any) -> str:
    if isinstance(v, torch.Tensor):
        return f"a {str(v.dtype).removeprefix('torch.')} tensor of shape {tuple(v.shape)}"
    return f"a {type(v).__name__}"


def compare_tensors(ref: torch.Tensor, cand: torch.Tensor, stats: Stats,
                    overrides: dict[str, Tolerance] | None, path: str, values_from: int | None = None) -> Mismatch | None:
    if cand.shape != ref.shape:
        return Mismatch("shape", f"{path} has shape {tuple(cand.shape)}; expected {tuple(ref.shape)}")
    if cand.dtype != ref.dtype:
        return Mismatch("dtype", f"{path} has dtype {cand.dtype}; expected {ref.dtype}")
    if cand.device.type != ref.device.type:
        return Mismatch("device", f"{path} is on {cand.device}; expected {ref.device.type}")
    r, c = ref.reshape(-1), cand.reshape(-1)
    if not (ref.is_floating_point() or ref.is_complex()):
        for start in range(0, r.numel(), CHUNK):
            rs, cs = r[start:start + CHUNK], c[start:start + CHUNK]
            bad = (rs != cs).nonzero()
            if bad.numel():
                i = start + int(bad[0])
                n = int((r != c).sum())
                return Mismatch("values", f"{path} differs at {_index(ref.shape, i)}: got {c[i].item()}, expected {r[i].item()} ({n} of {r.numel()} elements differ; integer outputs must match exactly)")
        return None
    tol = tolerance_for(ref.dtype, overrides)
    if r.numel() == 0:
        return None
    if values_from is not None and r.numel() >= values_from:
        for start in range(0, r.numel(), CHUNK):
            rs, cs = r[start:start + CHUNK], c[start:start + CHUNK]
            if rs.is_complex():
                rs, cs = torch.view_as_real(rs).reshape(-1), torch.view_as_real(cs).reshape(-1)
            if (found := _nonfinite_mismatch(rs, cs, start, ref.shape, path)) is not None:
                return found
        return None
    summary = _summary(r, c, tol)
    stats.max_abs = max(stats.max_abs, summary["max_abs"])
    stats.max_rel = max(stats.max_rel, summary["max_rel"])
    stats.norm_rel = max(stats.norm_rel, summary["norm_rel"])
    if summary["ok"]:
        return None
    return _explain(ref, r, c, tol, path) or Mismatch("values", f"{path} differs from the reference (relative norm error {summary['norm_rel']:.3g})")


def _summary(r: torch.Tensor, c: torch.Tensor, tol: Tolerance) -> dict[str, Any]:
    if r.is_cuda:
        from tools.judge import compare_gpu  # triton kernels: two passes over memory instead of twenty

        if compare_gpu.usable(r, c):
            return compare_gpu.float_summary(r, c, tol)
    return float_summary(r, c, tol)


def float_summary(r: torch.Tensor, c: torch.Tensor, tol: Tolerance) -> dict[str, Any]:
    """Every check on two flat floating tensors, computed on their device with one host sync:
    {"ok", "max_abs", "max_rel", "norm_rel"}. The fast path for trials and timed calls alike."""
    wide = torch.float64 if r.dtype in (torch.float64, torch.complex128) else torch.float32
    if r.is_complex():
        r, c = torch.view_as_real(r).reshape(-1), torch.view_as_real(c).reshape(-1)
    chunks = [(r[i:i + CHUNK], c[i:i + CHUNK]) for i in range(0, r.numel(), CHUNK)]
    zero = torch.zeros((), dtype=wide, device=r.device)
    bad, ref_sq, count = torch.zeros((), dtype=torch.bool, device=r.device), zero.clone(), zero.clone()
    for rs, cs in chunks:
        for fn in (torch.isnan, torch.isposinf, torch.isneginf):
            bad |= (fn(rs) != fn(cs)).any()
        finite = torch.isfinite(rs)
        rf = torch.where(finite, rs.to(wide), 0)
        ref_sq += (rf * rf).sum()
        count += finite.sum()
    scale = torch.where(ref_sq > 0, torch.sqrt(ref_sq / count.clamp_min(1)), torch.ones_like(ref_sq))
    max_abs, max_rel, diff_sq = zero.clone(), zero.clone(), zero.clone()
    for rs, cs in chunks:
        finite = torch.isfinite(rs)
        rw = torch.where(finite, rs.to(wide), 0)
        d = torch.where(finite, (cs.to(wide) - rw).abs(), 0)
        bad |= (d > tol.atol * scale + tol.rtol * rw.abs()).any()
        max_abs = torch.maximum(max_abs, d.max())
        max_rel = torch.maximum(max_rel, (d / (rw.abs() + 1e-12 * scale + 1e-30)).max())
        diff_sq += (d * d).sum()
    norm_rel = torch.where(ref_sq > 0, torch.sqrt(diff_sq / ref_sq.clamp_min(1e-300)), torch.sqrt(diff_sq))
    bad |= norm_rel > tol.norm_rtol
    flag, m_abs, m_rel, n_rel = torch.stack([bad.to(wide), max_abs, max_rel, norm_rel]).tolist()
    return {"ok": not flag, "max_abs": m_abs, "max_rel": m_rel, "norm_rel": n_rel}


def _explain(ref: torch.Tensor, r: torch.Tensor, c: torch.Tensor, tol: Tolerance, path: str) -> Mismatch | None:
    """The first failing element, for the message (only run once a check has failed)."""
    scale = _rms(r)
    diff_sq = ref_sq = 0.0
    for start in range(0, r.numel(), CHUNK):
        rs, cs = r[start:start + CHUNK], c[start:start + CHUNK]
        if rs.is_complex():
            rs, cs = torch.view_as_real(rs).reshape(-1), torch.view_as_real(cs).reshape(-1)
        found = _nonfinite_mismatch(rs, cs, start, ref.shape, path)
        if found:
            return found
        finite = torch.isfinite(rs)
        rd, cd = rs.double()[finite], cs.double()[finite]
        err = (cd - rd).abs()
        bound = tol.atol * scale + tol.rtol * rd.abs()
        over = err > bound
        if bool(over.any()):
            k = int(over.nonzero()[0])
            positions = finite.nonzero().reshape(-1)
            i = start + int(positions[k])
            count = int(over.sum())
            return Mismatch("values", f"{path} differs at {_index(ref.shape, i)}: got {float(cd[k]):.6g}, expected {float(rd[k]):.6g} (|diff| {float(err[k]):.3g} > allowed {float(bound[k]):.3g}; {count} of {r.numel()} elements in this slice exceed the {ref.dtype} tolerance rtol={tol.rtol}, atol={tol.atol}*rms)")
        diff_sq += float((err * err).sum())
        ref_sq += float((rd * rd).sum())
    norm_rel = math.sqrt(diff_sq) / math.sqrt(ref_sq) if ref_sq > 0 else math.sqrt(diff_sq)
    if norm_rel > tol.norm_rtol:
        return Mismatch("values", f"{path} is off as a whole: ||diff|| / ||expected|| = {norm_rel:.3g} > {tol.norm_rtol} allowed for {ref.dtype} (every element is within its own bound, but the errors add up)")
    return None


def _rms(r: torch.Tensor) -> float:
    total, count = 0.0, 0
    for start in range(0, r.numel(), CHUNK):
        s = r[start:start + CHUNK]
        s = torch.view_as_real(s) if s.is_complex() else s
        s = s[torch.isfinite(s)].double()
        total += float((s * s).sum())
        count += s.numel()
    rms = math.sqrt(total / count) if count else 0.0
    return rms if rms > 0 else 1.0


def _nonfinite_mismatch(rs: torch.Tensor, cs: torch.Tensor, start: int, shape: torch.Size, path: str) -> Mismatch | None:
    for name, fn in (("NaN", torch.isnan), ("+Inf", lambda x: torch.isposinf(x)), ("-Inf", lambda x: torch.isneginf(x))):
        rm, cm = fn(rs), fn(cs)
        bad = (rm != cm).nonzero()
        if bad.numel():
            i = int(bad[0])
            n = int((rm != cm).sum())
            what = f"is {name}" if bool(cm[i]) else f"is {float(cs[i]):.6g}"
            expected = name if bool(rm[i]) else f"{float(rs[i]):.6g}"
            return Mismatch("nan-pattern", f"{path} at {_index(shape, start + i)} {what}; expected {expected} ({n} elements differ in their {name} pattern; unwritten outputs read as NaN)")
    return None


def _index(shape: torch.Size, flat: int) -> str:
    if not shape:
        return "[]"
    idx = []
    for size in reversed(shape):
        idx.append(flat % size)
        flat //= size
    return "[" + ", ".join(str(i) for i in reversed(idx)) + "]"
