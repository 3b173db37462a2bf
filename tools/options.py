"""What an evaluation may be told: `EvalOptions`, every setting of an `Evaluator` in one record.

Light on purpose (no torch): the command line, the agent's settings and the warm pool read it
before any evaluator exists.
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from tools.judge.compare import Tolerance

# how a candidate's worker is confined (tools/sandbox/, docs/sandbox.md): "required" refuses to start
# without full OS confinement; "best-effort" uses what the machine has and records what it lacks
SANDBOX_MODES = ("required", "best-effort")


@dataclass(frozen=True)
class Float64Bound:
    """The float64-judged bound's multiples (tools/judge/exact.py applies them; calibrated on a GPU,
    docs/precision.md): a float32 output's error against the reference in float64 may be at most
    `norm_multiple` x eager's (norm) and `max_multiple` x eager's largest, plus `ulps` units in the
    last place of the output's scale."""

    norm_multiple: float = 8.0
    max_multiple: float = 16.0
    ulps: float = 4.0


@dataclass
class EvalOptions:
    device: str | None = None  # None: cuda:0 when there is a GPU, else cpu (Triton interpreter)
    trials: int = 5
    timing: bool = True
    precision: str = "fp32"  # fp32 | tf32 | bf16 | fp16: the arithmetic of the baselines and both workers (tools/precision.py)
    disabled_rules: frozenset[str] = frozenset()  # guard rules switched off (see docs/evaluator.md)
    tolerances: dict[str, Tolerance] | None = None  # per dtype name, overriding compare.TOLERANCES
    # float32 outputs judged against the reference in float64 (tools/judge/exact.py); None: off
    float64_bound: "Float64Bound | None" = field(default_factory=lambda: Float64Bound())
    float64_max_mb: int = 8192  # float64 copies of inputs, outputs and parameters, at most (else not judged so)
    # host memory a float64 evaluation in host memory may take, where rows over float64_max_mb cannot be
    # judged alone (tools/judge/exact_host.py); the reference worker's host limit grows by as much.
    # None: a quarter of the host's memory (resolved()); 0: none
    float64_host_mb: int | None = None
    seed: int | None = None  # None: a secret seed per Evaluator (per run)
    # seconds the parent may wait on one candidate's worker in all (tools/processes/allowance.py);
    # None: scaled to the problem (a minute, four timing budgets and 60 of the reference's forward passes)
    deadline_s: float | None = None
    start_timeout: float = 180.0
    build_timeout: float = 300.0
    trial_timeout: float = 60.0
    timing_budget_s: float = 3.0  # measured seconds per arm (candidate, eager, torch.compile) and evaluation
    timing_max_samples: int = 300  # per arm; tiny kernels rarely reach +-1%, so this bounds them
    compile_timeout: float = 900.0  # torch.compile's first call, once per problem and environment
    host_memory_mb: int | None = 16384
    file_mb: int | None = 1024  # largest file a worker may write, its output log included (None: no cap)
    gpu_memory_fraction: float | None = None
    cache_dir: Path | None = None
    reference_cache_mb: int = 4096  # reference outputs kept per seed up to this size
    warm: bool = True  # after each evaluation, start the next candidate worker ahead of need
    spares: int = 1  # candidate workers kept started (more for back-to-back evaluations, as in RL; 0: none)
    sandbox: str = "required"  # one of SANDBOX_MODES
    scratch_mb: int = 2048  # a confined worker's /tmp (its scratch) and /dev/shm, each
    max_processes: int = 1024  # processes and threads of one confined worker
    artifact_cache_mb: int = 4096  # build products kept between evaluations (tools/processes/artifacts.py)
    bytecode_cache: str = "auto"  # workers' .pyc where torch has none: "auto", "on", "off" (tools/processes/bytecode.py)
    extra: dict[str, Any] = field(default_factory=dict)


def default_cache_dir() -> Path:
    """Where an evaluator keeps what it measures or builds once, unless told (`cache_dir`):
    $RATCHET_CACHE_DIR, else ~/.cache/ratchet."""
    env = os.environ.get("RATCHET_CACHE_DIR")
    return Path(env).expanduser() if env else Path.home() / ".cache" / "ratchet"


def resolved(options: EvalOptions) -> EvalOptions:
    """The options with the device and the cache directory as they will be used: done once, where
    options enter the evaluator (Evaluator, WarmPool); the parts behind it read them as they are.
    DeviceError (a ValueError, one line) for a device this machine does not have."""
    from tools.env import resolve_device

    host_mb = options.float64_host_mb if options.float64_host_mb is not None else quarter_host_memory_mb()
    return replace(options, device=resolve_device(options.device),
                   cache_dir=(options.cache_dir or default_cache_dir()).resolve(), float64_host_mb=host_mb)


def quarter_host_memory_mb() -> int:
    """A quarter of the host's memory in MiB (MemTotal: the same at every resolve, so that warm
    workers' options match), or 0 where /proc/meminfo cannot be read. A quarter: the candidates'
    workers, the spares and other evaluators of the process need theirs."""
    try:
        with open("/proc/meminfo", encoding="ascii") as meminfo:
            for line in meminfo:
                if line.startswith("MemTotal:"):
                    return int(line.split()[1]) // 1024 // 4
    except (OSError, ValueError, IndexError):
        pass
    return 0
