"""The result record: one JSON-serializable record per evaluation, with stable field names.

Everything downstream (the CLI, the workspace's commit trailers, the agent's feedback, the RL
reward) reads these fields, so renaming one is a breaking change: bump SCHEMA_VERSION.

Versions: 1, the first; 2 adds the verdict `error` (an evaluator fault) and
`environment["sandbox"]` (how the candidate's worker was confined); 3 adds `distributions` (the
input distribution of each trial passed) and `dropped` (a distribution the problem does not
allow, and why); 4 adds `generalizes` (whether the candidate computes the module's function on
held-out sizes and constructor arguments: the drop-in check, tools/judge/heldout.py) and `heldout` (each
held-out variant and its outcome); 5 adds `roofline.bound` ("memory" or "compute": which ceiling
sets the floor, so the agent can stop a memory-bound search at its own target); 6 adds `precision`
("fp32" or "tf32": the float32 arithmetic of the baselines and both workers, tools/precision.py; an
older record's runs used PyTorch's defaults, TF32 convolutions included); 7 adds `errors.float64`
(whether float32 outputs were judged against the reference evaluated in float64, and what was not)
and `errors.float64_norm_ratio` / `errors.float64_max_ratio` (the candidate's largest error against
float64 as a multiple of eager float32's own: tools/judge/exact.py), `library_share` and `library`
(GPU time in library kernels the reference does not use: tools/timing/library.py); 8 adds
`eager_quiet` (eager timed on a quiet device, before any candidate: the speedup is taken against the
lower of it and the eager arm timed beside the candidate, which `eager_time` then is,
tools/timing/quiet.py); 9 lets `precision` be "bf16" or "fp16" too (the problem's floating
parameters, buffers and inputs cast to that type in both workers, its outputs judged against
float64 with eager's own error in that type as the yardstick: a reader of 8 would take such a
record's times and errors for float32 ones). `Result.from_dict`
reads every version (an older record simply lacks the newer fields, and is written back without
them). The exit code of each verdict: agent/cli/exit_codes.py.
"""
from __future__ import annotations

import dataclasses
import enum
import hashlib
from dataclasses import dataclass, field
from typing import Any

SCHEMA_VERSION = 9
READABLE_VERSIONS = (1, 2, 3, 4, 5, 6, 7, 8, 9)  # from_dict reads these; workspaces hold records of every one
# fields an older record does not have (written back without them); "a.b" is field b of the record's a
ADDED_IN = {"distributions": 3, "dropped": 3, "generalizes": 4, "heldout": 4, "roofline.bound": 5, "precision": 6,
            "errors.float64": 7, "errors.float64_norm_ratio": 7, "errors.float64_max_ratio": 7,
            "library_share": 7, "library": 7, "eager_quiet": 8}


class Verdict(str, enum.Enum):
    """The documented verdicts. Only OK means the candidate computes the reference's function."""

    OK = "ok"
    REJECTED = "rejected"  # a rule of the static guard or a run-time integrity check failed
    COMPILE_ERROR = "compile_error"  # the candidate did not load or build (syntax, import, nvcc)
    RUNTIME_ERROR = "runtime_error"  # it raised while constructing or running (incl. OOM)
    INCORRECT = "incorrect"  # it ran, but an output differs from the reference
    TIMEOUT = "timeout"  # it ran past its time limit (host or device hang); killed
    CRASHED = "crashed"  # the worker died without a reply (segfault, os._exit, sys.exit, kill)
    # an evaluator fault (a reference worker that could not be kept alive, an internal error of
    # ratchet): never the candidate's fault. Neither correct nor incorrect: a reward masks it, a
    # report counts it apart, training data can drop it.
    ERROR = "error"


@dataclass
class Check:
    """Outcome of one named check (a guard rule, a correctness trial, an integrity tripwire)."""

    name: str
    passed: bool
    detail: str = ""


@dataclass
class Errors:
    """Largest differences seen against the reference over all trials and outputs."""

    max_abs: float | None = None
    max_rel: float | None = None  # largest elementwise |a-b| / (|b| + eps)
    norm_rel: float | None = None  # largest ||a-b|| / ||b|| over outputs
    # the float64-judged bound (tools/judge/exact.py): "judged (N outputs)[; not judged: ...]" or "not judged: why"
    float64: str | None = None
    float64_norm_ratio: float | None = None  # worst ||c - r64|| / ||r32 - r64|| over the outputs judged
    float64_max_ratio: float | None = None  # worst max|c - r64| / max|r32 - r64|


@dataclass
class TimeStats:
    """A timing summary in milliseconds. measured=False means not measured (see `note`)."""

    measured: bool = False
    median_ms: float | None = None
    ci_low_ms: float | None = None  # 95% interval of the median
    ci_high_ms: float | None = None
    samples: int = 0
    note: str = "not measured"


@dataclass
class Roofline:
    measured: bool = False
    bytes_moved: int | None = None  # least bytes: each input, parameter and output once
    flops: int | None = None
    floor_ms: float | None = None  # the fastest the hardware allows
    achieved_fraction: float | None = None  # floor / candidate median
    note: str = "not measured"
    bound: str | None = None  # "memory" or "compute": the ceiling that sets the floor (None: not measured)


@dataclass
class Result:
    verdict: Verdict
    message: str  # written for the model: what failed, where, by how much
    schema_version: int = SCHEMA_VERSION
    problem: str = ""  # path of the reference file
    problem_hash: str = ""
    source_hash: str = ""  # sha256 of the candidate source
    checks: list[Check] = field(default_factory=list)
    errors: Errors = field(default_factory=Errors)
    trials: int = 0  # correctness trials passed
    distributions: list[str] = field(default_factory=list)  # the input distribution of each trial passed
    dropped: dict[str, str] = field(default_factory=dict)  # a distribution the problem does not allow: why
    # the drop-in check (tools/judge/heldout.py): True right on every held-out variant, False declared
    # specialized and refused one, None not tested (no variant, or failed before)
    generalizes: bool | None = None
    heldout: list[dict[str, Any]] = field(default_factory=list)  # {variant, outcome, detail} per variant
    candidate_time: TimeStats = field(default_factory=TimeStats)
    eager_time: TimeStats = field(default_factory=TimeStats)
    compile_time: TimeStats = field(default_factory=TimeStats)
    eager_quiet: TimeStats = field(default_factory=TimeStats)  # eager on a quiet device (schema 8)
    speedup_vs_eager: float | None = None
    speedup_vs_compile: float | None = None
    roofline: Roofline = field(default_factory=Roofline)
    own_kernel_share: float | None = None  # share of GPU time in the candidate's own kernels
    # share of GPU time in library kernels of a family the reference does not run; library: over half
    # (the work is not the candidate's: tools/timing/library.py; the reward pays no speedup by default)
    library_share: float | None = None
    library: bool | None = None
    kernel_launches: int = 0  # launches of the candidate's own kernels seen in one forward
    torch_ops: list[str] = field(default_factory=list)  # aten ops the candidate left to torch
    phases: dict[str, float] = field(default_factory=dict)  # seconds per phase
    environment: dict[str, Any] = field(default_factory=dict)
    precision: str | None = None  # "fp32" | "tf32" | "bf16" | "fp16" (tools/precision.py); None: before version 6

    @property
    def ok(self) -> bool:
        """The candidate computes the reference's function: verdict ok and no failed check."""
        return self.verdict is Verdict.OK and all(c.passed for c in self.checks)

    def to_dict(self) -> dict[str, Any]:
        data = dataclasses.asdict(self)
        data["verdict"] = self.verdict.value
        for name, version in ADDED_IN.items():
            if isinstance(self.schema_version, int) and self.schema_version < version:
                *outer, last = name.split(".")
                holder = data
                for part in outer:
                    holder = holder[part]
                holder.pop(last, None)
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "Result":
        version = data.get("schema_version")
        if version not in READABLE_VERSIONS:
            raise ValueError(f"result record has schema_version {version!r}, expected one of "
                             f"{', '.join(map(str, READABLE_VERSIONS))}")
        known = {f.name for f in dataclasses.fields(cls)}
        kwargs = {k: v for k, v in data.items() if k in known}
        kwargs["verdict"] = Verdict(data["verdict"])
        kwargs["checks"] = [Check(**c) for c in data.get("checks", [])]
        kwargs["errors"] = Errors(**data.get("errors", {}))
        for name in ("candidate_time", "eager_time", "compile_time", "eager_quiet"):
            kwargs[name] = TimeStats(**data.get(name, {}))
        kwargs["roofline"] = Roofline(**data.get("roofline", {}))
        return cls(**kwargs)


def describe_exception(exc: BaseException) -> str:
    """`Type: first line of the message`, for one-line reports of an evaluator fault."""
    text = next((line.strip() for line in str(exc).splitlines() if line.strip()), "(no message)")
    return f"{type(exc).__name__}: {text}"


def fault_result(exc: Exception, *, problem: str = "", source: str | None = None) -> Result:
    """The record of an evaluation that raised instead of answering (a bug of ratchet, a lost
    reference, an unusable cache): verdict error, the exception in one line, nothing about the
    candidate. Used wherever an evaluator's exception must not end the caller (CLI, reward, agent)."""
    return Result(verdict=Verdict.ERROR, problem=problem,
                  source_hash=hashlib.sha256(source.encode()).hexdigest() if source is not None else "",
                  message=f"ratchet's evaluator failed ({describe_exception(exc)}); this says nothing about "
                          f"the candidate: evaluate it again")
