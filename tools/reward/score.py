"""The reward of one evaluator result record: pure arithmetic, nothing is run.

    r = a * compiled + b * correct + c * g * min(speedup, cap) * correct

with the defaults a = 0.1, b = 0.3, c = 1.0, cap = 10, g = 1 for a kernel the drop-in check found
general and g = `not_general` (0.5) for one it did not (`generalizes: false`: a declared
specialization that refused other sizes, or a forward that left to torch on other sizes what its
own kernels computed on the problem's), the term times `library` (0) for a kernel whose GPU time is
mostly library kernels the reference does not use (record `library: true`, tools/timing/library.py),
and the speedup taken against eager
PyTorch (`baseline="compile"`: against torch.compile). `compiled` means the candidate loaded
and built in its worker; `correct` means the verdict is ok (every trial passed, every integrity
check held). Any guard or run-time integrity violation (verdict rejected) scores 0, whatever
else it did, and the outcome names the rule. Where timing was not measured (no GPU, timing off,
torch.compile failed for that baseline) the speedup term is 0 and the outcome says why.

An evaluator fault (verdict error: ratchet failed, not the completion) scores the neutral
`fault_reward` (default 0.0) with `evaluator_fault=True` on the outcome: a trainer should mask
these outcomes (drop them from the loss), so the policy is never punished, or paid, for our fault.

`RewardConfig` also holds the settings of the evaluators `tools.reward.kernel_reward.KernelReward` keeps warm,
and of where they run (`executor="ray"`: Ray actors, tools/reward/on_ray.py and docs/reward.md).
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from tools.record import Result, Verdict, fault_result

BASELINES = ("eager", "compile")
EXECUTORS = ("local", "ray")
FORMAT_ERROR = "format_error"  # the outcome's verdict when no candidate could be extracted


@dataclass(frozen=True)
class RewardConfig:
    compiled: float = 0.1  # a: the candidate loaded and built
    correct: float = 0.3  # b: verdict ok
    speedup: float = 1.0  # c: times min(speedup, cap), for correct candidates only
    cap: float = 10.0
    not_general: float = 0.5  # g: the speedup term's factor for a kernel that is not general (generalizes false)
    library: float = 0.0  # the speedup term's factor for a kernel whose time is mostly library work (record library true)
    fault_reward: float = 0.0  # an evaluator fault (never the completion's): neutral; mask these outcomes
    baseline: str = "eager"  # "eager" or "compile" (torch.compile, default mode)
    problem_column: str = "problem"  # dataset column holding the problem file's path
    entry_column: str = "entry"  # optional column naming the reference class (default Model)
    problem_root: str | None = None  # relative problem paths are resolved against it (default: cwd)
    # the evaluator
    device: str | None = None  # None: cuda:0 when there is a GPU, else cpu (Triton interpreter)
    trials: int = 5
    timing: bool = True
    precision: str = "fp32"  # fp32 | tf32 | bf16 | fp16: the baselines' and workers' arithmetic (tools/precision.py)
    spares: int = 2  # warm candidate workers per problem; also the concurrency per problem
    max_workers: int | None = None  # threads over all problems (None: spares x problems in the batch, at most 32)
    exclusive_timing: bool = True  # on a GPU with timing on: one evaluation per device at a time
    eval_options: dict[str, Any] = field(default_factory=dict)  # more EvalOptions fields
    cache_size: int = 4096  # outcomes kept by (problem, entry, source hash); 0: none
    log_path: str | None = None  # append every outcome as a JSON line
    max_problems: int | None = None  # warm evaluators kept at most (least recently used closed first); None: all
    # where the evaluations run: "local" (this process's KernelReward) or "ray" (a pool of Ray
    # actors, tools/reward/on_ray.py; make the reward with tools.reward.make_reward)
    executor: str = "local"
    ray_address: str = "auto"  # "auto": the running cluster; "local": start one here; or "ray://host:port"
    actors: int = 1  # Ray actors, one GPU each (one CPU each on device "cpu")
    ray_timeout_s: float | None = 3600.0  # per batch; an actor past it is restarted and its completions score as faults
    ray_max_restarts: int = 3  # an actor that dies is restarted this often, and its calls retried

    def __post_init__(self) -> None:
        if self.baseline not in BASELINES:
            raise ValueError(f"baseline must be one of {', '.join(BASELINES)}, not {self.baseline!r}")
        if self.cap <= 0:
            raise ValueError("cap must be positive")
        for name in ("not_general", "library"):
            if not 0 <= getattr(self, name) <= 1:
                raise ValueError(f"{name} must be between 0 and 1, not {getattr(self, name)}")
        from tools.precision import check

        check(self.precision)  # PrecisionError, a ValueError
        if self.executor not in EXECUTORS:
            raise ValueError(f"executor must be one of {', '.join(EXECUTORS)}, not {self.executor!r}")
        if self.max_problems is not None and self.max_problems < 1:
            raise ValueError(f"max_problems must be at least 1 (or None: no bound), not {self.max_problems}")
        if self.actors < 1:
            raise ValueError(f"actors must be at least 1, not {self.actors}")
        if self.ray_max_restarts < 0:
            raise ValueError(f"ray_max_restarts must be 0 or more, not {self.ray_max_restarts}")


@dataclass
class RewardOutcome:
    """One scored completion: the reward, its components, and why."""

    reward: float
    verdict: str  # the evaluator's verdict ("error": an evaluator fault), or "format_error"
    compiled: bool = False
    correct: bool = False
    speedup: float | None = None  # against the configured baseline; None when not measured
    speedup_term: float = 0.0  # c * g * min(speedup, cap) when correct, else 0
    generalizes: bool | None = None  # the record's drop-in check (False: the term scaled by not_general)
    library: bool | None = None  # the record's library mark (True: the term scaled by library)
    timing_measured: bool = False
    baseline: str = "eager"
    precision: str | None = None  # the record's: the baselines' float32 arithmetic (None: no record, or one before schema 6)
    reason: str = ""  # why the reward is what it is (failed check, rejection rule, format problem)
    note: str = ""  # e.g. why the speedup term is 0
    problem: str = ""
    problem_hash: str = ""
    source_hash: str | None = None
    cached: bool = False  # scored earlier (same problem and source); not evaluated again
    evaluator_fault: bool = False  # ratchet failed, not the completion: the reward is fault_reward; mask it
    record: dict[str, Any] | None = None  # the evaluator's full result record

    def to_dict(self, record: bool = True) -> dict[str, Any]:
        data = asdict(self)
        if not record:
            data.pop("record")
        return data


# checks whose failure earns the minimum reward whatever the verdict: the evaluation's deadline spent
# stalling (a `timeout`), a fault the candidate caused on the evaluator's side (rejected, rule resource)
MINIMUM_CHECKS = frozenset({"deadline", "resource"})


def score_record(record: Result | dict[str, Any], config: RewardConfig | None = None) -> RewardOutcome:
    """The reward of one evaluator result record (pure arithmetic; nothing is run)."""
    config = config or RewardConfig()
    data = record.to_dict() if isinstance(record, Result) else record
    verdict = data["verdict"]
    checks = data.get("checks") or []
    failed = next((c for c in checks if not c.get("passed")), None)
    base = dict(verdict=verdict, baseline=config.baseline, precision=data.get("precision"), problem=data.get("problem", ""),
                problem_hash=data.get("problem_hash", ""), source_hash=data.get("source_hash"), record=data)
    compiled = any(c.get("name") == "build" and c.get("passed") for c in checks)
    if verdict == Verdict.ERROR.value:
        return RewardOutcome(reward=float(config.fault_reward), evaluator_fault=True,
                             reason=f"evaluator fault: {_first_line(data.get('message'))}",
                             note="not the completion's fault: neutral reward; mask this outcome in training", **base)
    if verdict == Verdict.REJECTED.value or (failed is not None and failed.get("name") in MINIMUM_CHECKS):
        rule = failed["name"] if failed else "rejected"
        return RewardOutcome(reward=0.0, compiled=compiled, reason=f"{rule}: {_first_line(data.get('message'))}",
                             note="guard or integrity violation, or the evaluation's deadline spent: reward 0", **base)
    correct = verdict == Verdict.OK.value
    timing = data.get("candidate_time") or {}
    measured = bool(timing.get("measured"))
    speedup = data.get("speedup_vs_eager" if config.baseline == "eager" else "speedup_vs_compile")
    speedup = float(speedup) if isinstance(speedup, (int, float)) and speedup == speedup and speedup > 0 else None
    term, note = 0.0, ""
    if correct:
        if not measured:
            note = f"speedup term 0: timing {timing.get('note') or 'not measured'}"
        elif speedup is None:
            other = data.get("compile_time" if config.baseline == "compile" else "eager_time") or {}
            note = f"speedup term 0: no {config.baseline} baseline ({other.get('note') or 'not measured'})"
        else:
            term = config.speedup * min(speedup, config.cap)
            if data.get("generalizes") is False:
                term *= config.not_general
                note = (f"speedup term x{config.not_general:g}: not general (a declared specialization, or torch "
                        "left to do the work on other sizes)")
            if data.get("library") is True:
                term *= config.library
                note = "; ".join(filter(None, [note, f"speedup term x{config.library:g}: most GPU time in library kernels "
                                                      f"the reference does not use ({data.get('library_share')})"]))
    reward = config.compiled * compiled + config.correct * correct + term
    reason = "" if correct else f"{failed['name'] if failed else verdict}: {_first_line(data.get('message'))}"
    return RewardOutcome(reward=float(reward), compiled=compiled, correct=correct, speedup=speedup if measured else None,
                         speedup_term=term, timing_measured=measured, reason=reason, note=note,
                         generalizes=data.get("generalizes"), library=data.get("library"), **base)


def fault_outcome(exc: Exception, problem: str, source: str, config: RewardConfig | None = None) -> RewardOutcome:
    """The outcome of an evaluation that raised instead of answering (the evaluator could not
    start, or failed inside evaluate()): a record with verdict error, scored as a fault."""
    return score_record(fault_result(exc, problem=problem, source=source), config)


def _first_line(text: str | None, limit: int = 300) -> str:
    line = next((l.strip() for l in (text or "").splitlines() if l.strip()), "")
    return line if len(line) <= limit else line[: limit - 3] + "..."
