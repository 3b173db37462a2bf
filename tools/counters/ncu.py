"""Nsight Compute around a candidate's worker: where ncu is, its command line, and the digest of
what it printed (parent side; nothing here decides a verdict).

ncu runs as the worker's parent inside the worker's own sandbox (tools/sandbox/, Sandbox.launch's
`wrapper`): the same namespaces, seccomp filter and unprivileged uid. It collects only inside the
CUDA profiler's range, which the worker opens around one forward (tools/worker/profile.py,
counted_forward), and it leaves the card's clocks alone (`--clock-control none`: the evaluator
never changes the device's settings, and other evaluations may be timing on it).

What it prints reaches the parent through the worker's log, which the candidate can also write:
the digest is advice for the model, never evidence for a verdict, and a candidate that forges it
misleads only itself. Lines are parsed strictly (CSV rows of the header's width, numbers as
numbers) and the digest is bounded.
"""
from __future__ import annotations

import csv
import math
import os
import re
import shutil
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tools.sandbox.paths import PROJECT_ROOT

SECTIONS = ("SpeedOfLight", "Occupancy", "LaunchStats", "WarpStateStats")
EXTRA_METRICS = ("dram__bytes.sum.per_second",)
MAX_KERNELS = 64  # launches profiled in the forward (each is replayed once per counter pass)
TOP_KERNELS = 8  # kernels in the digest, by GPU time
TOP_STALLS = 3
NAME_CHARS = 160
LOG_BYTES = 8 << 20  # of the worker's log read back
LINE_CHARS = 64 << 10  # a longer line is not ncu's (its raw page's rows are about 10 KB)
PERMISSION = "ERR_NVGPUCTRPERM"

# raw metric name -> digest field; several names per field where architectures or versions differ
FIELDS: dict[str, tuple[str, ...]] = {
    "dram_pct": ("gpu__dram_throughput.avg.pct_of_peak_sustained_elapsed",
                 "dram__throughput.avg.pct_of_peak_sustained_elapsed"),
    "memory_pct": ("gpu__compute_memory_throughput.avg.pct_of_peak_sustained_elapsed",),
    "sm_pct": ("sm__throughput.avg.pct_of_peak_sustained_elapsed",),
    "dram_gb_s": ("dram__bytes.sum.per_second",),
    "occupancy_pct": ("sm__warps_active.avg.pct_of_peak_sustained_active",),
    "theoretical_occupancy_pct": ("sm__maximum_warps_per_active_cycle_pct",),
    "registers": ("launch__registers_per_thread",),  # the launch's own: of its first launch, not averaged
    "block": ("launch__block_size",),
    "grid": ("launch__grid_size",),
    "shared_kb": ("launch__shared_mem_per_block",),
}
LAUNCH = ("launch__registers_per_thread", "launch__block_size", "launch__grid_size", "launch__shared_mem_per_block")
# a warp-state metric: the reason a warp could not issue, in cycles per issued instruction
STALL = re.compile(r"^smsp__average_warps?_(?:latency_)?issue_stalled_([a-z_]+?)_per_(?:warp|issue)_active\.ratio$")
# units ncu prints (`--print-units base`, or scaled): times to us, bandwidth to GB/s, memory to KB
PREFIX = {"": 1.0, "K": 1e3, "k": 1e3, "M": 1e6, "G": 1e9, "T": 1e12}
TIME_UNITS = {"ns": 1e-3, "nsecond": 1e-3, "us": 1.0, "usecond": 1.0, "ms": 1e3, "msecond": 1e3, "s": 1e6, "second": 1e6}
UNIT = re.compile(r"^(?P<prefix>[KkMGT]?)(?:byte|B)(?P<rate>/s(?:econd)?)?(?:/block)?$")


def find_ncu() -> Path | None:
    """ncu as RATCHET_NCU names it, else on PATH, else under the CUDA toolkit's usual homes."""
    named = os.environ.get("RATCHET_NCU")
    if named:
        return Path(named) if Path(named).is_file() else None
    found = shutil.which("ncu")
    if found:
        return Path(found).resolve()
    for home in (os.environ.get("CUDA_HOME"), "/usr/local/cuda"):
        if home and (Path(home) / "bin" / "ncu").is_file():
            return (Path(home) / "bin" / "ncu").resolve()
    return None


def command(ncu: Path) -> list[str]:
    """ncu's command line up to the worker's own (started by tools/worker/wrap.py, which makes the
    worker's TMPDIR first: ncu needs it when it starts, "Failed to create temporary file" on an
    H100, and the worker's own TMPDIR must stay where its guard lets it write)."""
    argv = [str(ncu), "--profile-from-start", "off", "--clock-control", "none", "--target-processes", "all",
            "--launch-count", str(MAX_KERNELS), "--csv", "--page", "raw", "--print-units", "base"]
    for section in SECTIONS:
        argv += ["--section", section]
    return argv + ["--metrics", ",".join(EXTRA_METRICS)]


def installation(ncu: Path) -> list[Path]:
    """The Nsight Compute installations ncu's launcher may run: next to its toolkit, or under
    /opt/nvidia (seen on an H100 image: /usr/local/cuda/bin/ncu, a script, running
    /opt/nvidia/nsight-compute/2025.3.1), and the directory ncu itself is in when that is one of
    them or a directory of its own: never one that holds the user's home or the project (whose
    caches a candidate must not see), nor the root."""
    real = ncu.resolve()
    top = real.parent.parent if real.parent.name == "bin" else real.parent
    found = [*sorted(top.glob("nsight-compute*")), *sorted(top.parent.glob("nsight-compute*"))]
    found += sorted(Path("/opt/nvidia").glob("nsight-compute*")) if Path("/opt/nvidia").is_dir() else []
    if real.parent.name != "bin":
        found.append(real.parent)
    kept = []
    for path in (p.resolve() for p in found if p.is_dir()):
        if all(path != q and path not in q.parents for q in (Path.home().resolve(), PROJECT_ROOT)) and path not in kept:
            kept.append(path)
    return kept


def executables(ncu: Path) -> list[Path]:
    """What ncu may execute, besides the worker's own list: its launcher, its installation, and the
    system's programs its launcher script runs (a shell and coreutils; a candidate's worker can
    already run those through the ELF loader it keeps)."""
    system = [Path(p).resolve() for p in ("/usr/bin", "/bin") if Path(p).is_dir()]
    return list(dict.fromkeys([ncu.resolve(), *installation(ncu), *system, Path(sys.executable).resolve()]))


@dataclass
class Kernel:
    name: str
    calls: int = 0
    time_us: float = 0.0
    metrics: dict[str, float | str] = field(default_factory=dict)
    stalls: list[tuple[str, float]] = field(default_factory=list)


def parse(text: str) -> list[Kernel]:
    """The kernels of ncu's raw CSV page in `text` (other lines, the worker's or the candidate's,
    are skipped), one per kernel name, its numeric metrics averaged over its launches by time."""
    # each line read by itself: a stray quote (the candidate's own output in the same log) must not
    # join the lines after it into one field
    rows = [row for line in text.splitlines() if line.startswith('"') and len(line) <= LINE_CHARS
            for row in _rows(line)]
    header = next((r for r in rows if "Kernel Name" in r and "ID" in r), None)
    if header is None:
        return []
    width, name_at = len(header), header.index("Kernel Name")
    units = next((r for r in rows if len(r) == width and r is not header and not r[0].strip()), [""] * width)
    kernels: dict[str, Kernel] = {}
    sums: dict[str, dict[str, float]] = {}
    for row in rows:
        if len(row) != width or row is header or row is units or not row[0].strip().isdigit():
            continue
        name = row[name_at][:NAME_CHARS]
        values = {header[i]: _number(row[i], units[i]) for i in range(width)}
        time_us = values.get("gpu__time_duration.sum")
        if not isinstance(time_us, float):
            continue
        k = kernels.setdefault(name, Kernel(name))
        acc = sums.setdefault(name, {})
        k.calls += 1
        k.time_us += time_us
        for key, value in values.items():
            if key in LAUNCH:
                k.metrics.setdefault(key, value)
            elif isinstance(value, float):
                acc[key] = acc.get(key, 0.0) + value * time_us
    for name, k in kernels.items():
        mean = {key: total / k.time_us for key, total in sums[name].items()} if k.time_us > 0 else {}
        for out, names in FIELDS.items():
            found: float | str | None = next((mean[n] for n in names if n in mean), None)
            if found is None:
                found = next((k.metrics[n] for n in names if n in k.metrics), None)
            if isinstance(found, float) and not math.isfinite(found):  # sums past a float's range
                continue
            if isinstance(found, float) and found.is_integer() and abs(found) < 1 << 53:
                k.metrics[out] = int(found)
            elif found is not None:
                k.metrics[out] = round(found, 2) if isinstance(found, float) else found
        for key in list(k.metrics):
            if "__" in key:
                del k.metrics[key]
        stalls = [(m.group(1), v) for key, v in mean.items()
                  if (m := STALL.match(key)) and m.group(1) != "selected" and math.isfinite(v)]
        k.stalls = [(reason, round(v, 2)) for reason, v in sorted(stalls, key=lambda s: -s[1])[:TOP_STALLS] if v > 0]
        k.time_us = round(k.time_us, 3)
    return sorted(kernels.values(), key=lambda k: -k.time_us)


def _rows(line: str) -> list[list[str]]:
    try:
        return list(csv.reader([line]))
    except csv.Error:  # not ncu's: a candidate's line
        return []


def _number(text: str, unit: str) -> float | str:
    cleaned = text.strip().replace(",", "")
    try:
        value = float(cleaned)
    except ValueError:
        return text.strip()[:40]
    value *= _scale(unit.strip())
    if not math.isfinite(value):
        return text.strip()[:40]
    return value


def _scale(unit: str) -> float:
    if unit in TIME_UNITS:
        return TIME_UNITS[unit]
    m = UNIT.match(unit)
    if not m:
        return 1.0
    factor = PREFIX[m.group("prefix")]
    return factor / 1e9 if m.group("rate") else factor / 1024


def digest(kernels: list[Kernel], own: list[str]) -> list[dict[str, Any]]:
    """The model's view: the TOP_KERNELS longest kernels, each marked as the candidate's own (a name
    its source defines) or a library's."""
    out = []
    for k in kernels[:TOP_KERNELS]:
        entry = {"name": k.name, "own": _defines(k.name, own), "calls": k.calls, "time_us": k.time_us,
                 **k.metrics, "top_stalls": [{"reason": r, "cycles_per_issue": v} for r, v in k.stalls]}
        out.append(entry)
    return out


def _defines(kernel: str, own: list[str]) -> bool:
    """Whether `kernel` (a name as ncu prints it: a Triton kernel's own name, or a CUDA kernel's
    demangled signature) is one of the source's own: one of `own` as a whole identifier in it."""
    return any(n and re.search(rf"(?<![A-Za-z0-9_]){re.escape(n)}(?![A-Za-z0-9_])", kernel) for n in own)


def refusal(text: str) -> str | None:
    """Why ncu collected nothing, in one line, when its output says (permission, no kernel)."""
    if PERMISSION in text:
        return ("the GPU driver lets only administrators read performance counters (ERR_NVGPUCTRPERM: "
                "NVreg_RestrictProfilingToAdminUsers=1), and a candidate's worker runs without privileges; "
                "ratchet does not read them outside the sandbox")
    errors = [line.strip() for line in text.splitlines() if line.startswith("==ERROR==")]
    return errors[0][:300] if errors else None


