"""The evaluator as a reinforcement-learning reward.

    r = a * compiled + b * correct + c * min(speedup, cap) * correct

with the defaults a = 0.1, b = 0.3, c = 1.0, cap = 10 and the speedup taken against eager
PyTorch (`baseline="compile"`: against torch.compile). `compiled` means the candidate loaded
and built in its worker; `correct` means the verdict is ok (every trial passed, every integrity
check held). Any guard or run-time integrity violation (verdict rejected) scores 0, whatever
else it did, and the outcome names the rule. Where timing was not measured (no GPU, timing off,
torch.compile failed for that baseline) the speedup term is 0 and the outcome says why.

A completion is a full candidate source, or a chat reply containing one: a `submit_kernel` tool
call (OpenAI `tool_calls`, a `<tool_call>{...}</tool_call>` block or a bare JSON call), or a
```python fence defining `ModelNew`. Nothing else scores (verdict "format_error", reward 0).

The callable `KernelReward` has the reward-function signature of TRL's GRPOTrainer:

    reward = KernelReward(RewardConfig(device="cuda:0"))
    reward(prompts, completions, problem=[...], **other_columns) -> list[float]

`completions` are strings or lists of chat messages; the problem file of each completion comes
from a dataset column (`problem` by default; `entry` names a class other than `Model`). One
Evaluator per problem is kept warm (`spares` candidate workers started ahead of need) for the
reward's lifetime and closed at exit. Distinct completions are scored in parallel in a thread
pool; identical ones (same problem and source hash) are evaluated once, and recent outcomes are
cached. On a GPU with timing on, evaluations on one device run one at a time by default
(`exclusive_timing`), so that concurrent kernels do not perturb each other's timings (CUDA C++
candidates start their load_inline builds on CPU cores first, `Evaluator.prebuild`); on the CPU
(nothing is timed) they run concurrently, at most `spares` per problem. `Evaluator.evaluate` is
thread-safe (a lock guards the shared reference worker and the spare pool).

No agent imports: an RL trainer needs only `tools`.
"""
from __future__ import annotations

import atexit
import collections
import json
import re
import threading
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Iterable, Sequence

from tools.record import Result, Verdict
from tools.toolcalls import SUBMIT_KERNEL, FormatError, Submission, parse_call, source_hash, validate_source

BASELINES = ("eager", "compile")
FORMAT_ERROR = "format_error"  # the outcome's verdict when no candidate could be extracted


@dataclass(frozen=True)
class RewardConfig:
    compiled: float = 0.1  # a: the candidate loaded and built
    correct: float = 0.3  # b: verdict ok
    speedup: float = 1.0  # c: times min(speedup, cap), for correct candidates only
    cap: float = 10.0
    baseline: str = "eager"  # "eager" or "compile" (torch.compile, default mode)
    problem_column: str = "problem"  # dataset column holding the problem file's path
    entry_column: str = "entry"  # optional column naming the reference class (default Model)
    problem_root: str | None = None  # relative problem paths are resolved against it (default: cwd)
    # the evaluator
    device: str | None = None  # None: cuda:0 when there is a GPU, else cpu (Triton interpreter)
    trials: int = 5
    timing: bool = True
    spares: int = 2  # warm candidate workers per problem; also the concurrency per problem
    max_workers: int | None = None  # threads over all problems (None: spares x problems in the batch, at most 32)
    exclusive_timing: bool = True  # on a GPU with timing on: one evaluation per device at a time
    eval_options: dict[str, Any] = field(default_factory=dict)  # more EvalOptions fields
    cache_size: int = 4096  # outcomes kept by (problem, entry, source hash); 0: none
    log_path: str | None = None  # append every outcome as a JSON line

    def __post_init__(self) -> None:
        if self.baseline not in BASELINES:
            raise ValueError(f"baseline must be one of {', '.join(BASELINES)}, not {self.baseline!r}")
        if self.cap <= 0:
            raise ValueError("cap must be positive")


@dataclass
class RewardOutcome:
    """One scored completion: the reward, its components, and why."""

    reward: float
    verdict: str  # the evaluator's verdict, or "format_error"
    compiled: bool = False
    correct: bool = False
    speedup: float | None = None  # against the configured baseline; None when not measured
    speedup_term: float = 0.0  # c * min(speedup, cap) when correct, else 0
    timing_measured: bool = False
    baseline: str = "eager"
    reason: str = ""  # why the reward is what it is (failed check, rejection rule, format problem)
    note: str = ""  # e.g. why the speedup term is 0
    problem: str = ""
    problem_hash: str = ""
    source_hash: str | None = None
    cached: bool = False  # scored earlier (same problem and source); not evaluated again
    record: dict[str, Any] | None = None  # the evaluator's full result record

    def to_dict(self, record: bool = True) -> dict[str, Any]:
        data = asdict(self)
        if not record:
            data.pop("record")
        return data


# --- extracting the candidate ----------------------------------------------------------------

_TOOL_TAG = re.compile(r"<tool_call>\s*(.*?)\s*</tool_call>", re.DOTALL)
_FENCE = re.compile(r"```[ \t]*(?P<lang>[\w+-]*)[ \t]*\n(?P<body>.*?)```", re.DOTALL)
_CALL_START = re.compile(r'\{\s*"(?:name|function|type)"')


def extract_source(completion: Any) -> Submission | FormatError:
    """The candidate in a completion: a string, one chat message, or a list of messages."""
    if isinstance(completion, dict):
        completion = [completion]
    if isinstance(completion, (list, tuple)):
        return _from_messages(completion)
    if isinstance(completion, str):
        return _from_text(completion)
    return FormatError(f"a completion must be a string or chat messages, not {type(completion).__name__}")


def _from_messages(messages: Sequence[Any]) -> Submission | FormatError:
    found: FormatError | None = None
    for message in reversed([m for m in messages if isinstance(m, dict) and m.get("role", "assistant") == "assistant"]):
        for call in message.get("tool_calls") or []:
            fn = call.get("function", call) if isinstance(call, dict) else {}
            if fn.get("name") == SUBMIT_KERNEL:
                return _submission(parse_call(SUBMIT_KERNEL, fn.get("arguments")))
        content = message.get("content")
        if isinstance(content, list):  # content parts
            content = "".join(p.get("text", "") for p in content if isinstance(p, dict))
        if isinstance(content, str) and content.strip():
            parsed = _from_text(content)
            if isinstance(parsed, Submission):
                return parsed
            found = found or parsed
    return found or FormatError("the completion holds no assistant message with a submit_kernel call or a ModelNew source")


def _from_text(text: str) -> Submission | FormatError:
    calls = [m.group(1) for m in _TOOL_TAG.finditer(text)]
    calls += [_raw_json(text, m.start()) for m in _CALL_START.finditer(text)]
    first_error: FormatError | None = None
    for raw in calls:
        call = _json_object(raw)
        fn = call.get("function", call) if call else None
        if isinstance(fn, dict) and fn.get("name") == SUBMIT_KERNEL:
            parsed = _submission(parse_call(SUBMIT_KERNEL, fn.get("arguments", fn.get("parameters"))))
            if isinstance(parsed, Submission):
                return parsed
            first_error = first_error or parsed
    fences = [m for m in _FENCE.finditer(text) if m.group("lang").lower() in ("", "python", "py", "python3")]
    for match in reversed(fences):  # the last fence that is a candidate
        parsed = validate_source(match.group("body"))
        if isinstance(parsed, Submission):
            return parsed
        first_error = first_error or parsed
    if not fences and not calls:
        parsed = validate_source(text)
        if isinstance(parsed, Submission):
            return parsed
        first_error = first_error or parsed
    return first_error or FormatError("no ModelNew source found in the completion")


def _raw_json(text: str, start: int) -> str:
    try:
        _, end = json.JSONDecoder().raw_decode(text, start)
    except ValueError:
        return ""
    return text[start:end]


def _json_object(raw: str) -> dict[str, Any] | None:
    try:
        value = json.loads(raw)
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


def _submission(parsed: Any) -> Submission | FormatError:
    return parsed if isinstance(parsed, (Submission, FormatError)) else FormatError("not a submit_kernel call")


# --- scoring a result record -----------------------------------------------------------------


def score_record(record: Result | dict[str, Any], config: RewardConfig | None = None) -> RewardOutcome:
    """The reward of one evaluator result record (pure arithmetic; nothing is run)."""
    config = config or RewardConfig()
    data = record.to_dict() if isinstance(record, Result) else record
    verdict = data["verdict"]
    checks = data.get("checks") or []
    failed = next((c for c in checks if not c.get("passed")), None)
    base = dict(verdict=verdict, baseline=config.baseline, problem=data.get("problem", ""),
                problem_hash=data.get("problem_hash", ""), source_hash=data.get("source_hash"), record=data)
    compiled = any(c.get("name") == "build" and c.get("passed") for c in checks)
    if verdict == Verdict.REJECTED.value:
        rule = failed["name"] if failed else "rejected"
        return RewardOutcome(reward=0.0, compiled=compiled, reason=f"{rule}: {_first_line(data.get('message'))}",
                             note="guard or integrity violation: reward 0", **base)
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
    reward = config.compiled * compiled + config.correct * correct + term
    reason = "" if correct else f"{failed['name'] if failed else verdict}: {_first_line(data.get('message'))}"
    return RewardOutcome(reward=float(reward), compiled=compiled, correct=correct, speedup=speedup if measured else None,
                         speedup_term=term, timing_measured=measured, reason=reason, note=note, **base)


def _first_line(text: str | None, limit: int = 300) -> str:
    line = next((l.strip() for l in (text or "").splitlines() if l.strip()), "")
    return line if len(line) <= limit else line[: limit - 3] + "..."


# --- the reward function -----------------------------------------------------------------------


class KernelReward:
    """A GRPOTrainer-style reward function over warm evaluators (one per problem). Thread-safe."""

    def __init__(self, config: RewardConfig | None = None, **overrides: Any) -> None:
        config = config or RewardConfig()
        if overrides:
            config = RewardConfig(**{**asdict(config), **overrides})
        self.config = config
        self.__name__ = "ratchet_kernel_reward"  # trainers log rewards under the function's name
        self._evaluators: dict[tuple[str, str], Any] = {}
        self._creating: dict[tuple[str, str], threading.Lock] = collections.defaultdict(threading.Lock)
        self._slots: dict[tuple[str, str], threading.BoundedSemaphore] = {}
        self._serial: dict[tuple[str, str], threading.Lock] = {}
        self._devices: dict[str, threading.Lock] = collections.defaultdict(threading.Lock)
        self._cache: collections.OrderedDict[tuple[str, str, str], RewardOutcome] = collections.OrderedDict()
        self._lock = threading.Lock()
        self._pool: ThreadPoolExecutor | None = None
        self._pool_size = 0
        self._closed = False
        self.last: list[RewardOutcome] = []  # the outcomes of the latest call, in order
        atexit.register(self.close)

    # the GRPOTrainer signature ------------------------------------------------------------------
    def __call__(self, prompts: Sequence[Any] | None = None, completions: Sequence[Any] | None = None,
                 **columns: Any) -> list[float]:
        if completions is None:
            raise TypeError("the reward needs completions")
        n = len(completions)
        problems = self._column(columns, self.config.problem_column, n, required=True)
        entries = self._column(columns, self.config.entry_column, n, required=False)
        outcomes = self.score(completions, problems, entries)
        return [o.reward for o in outcomes]

    @staticmethod
    def _column(columns: dict[str, Any], name: str, n: int, *, required: bool) -> list[Any]:
        value = columns.get(name)
        if value is None:
            if required:
                raise KeyError(f"the reward needs a dataset column {name!r} with each completion's problem file "
                               f"(got columns: {', '.join(sorted(columns)) or 'none'})")
            return [None] * n
        if isinstance(value, (str, Path)):
            return [value] * n
        value = list(value)
        if len(value) != n:
            raise ValueError(f"column {name!r} has {len(value)} values for {n} completions")
        return value

    # scoring ---------------------------------------------------------------------------------
    def score(self, completions: Sequence[Any], problems: Sequence[str | Path],
              entries: Sequence[str | None] | None = None) -> list[RewardOutcome]:
        """Score completions (each against its problem) in parallel; outcomes in order."""
        entries = list(entries) if entries is not None else [None] * len(completions)
        keys = [(self._resolve(p), e or "Model") for p, e in zip(problems, entries)]
        parsed = [extract_source(c) for c in completions]
        self._ensure_pool(len(set(keys)))
        for key in dict.fromkeys(keys):  # all evaluators start together (their workers load in parallel)
            self._submit(lambda key=key: self.evaluator(*key))
        work: dict[tuple[str, str, str], Future] = {}
        for key, item in zip(keys, parsed):
            if isinstance(item, Submission):
                job = (*key, item.source_hash)
                if job not in work:
                    work[job] = self._submit(lambda key=key, item=item: self._score_source(key, item.source))
        outcomes = []
        for key, item in zip(keys, parsed):
            if isinstance(item, FormatError):
                outcomes.append(RewardOutcome(reward=0.0, verdict=FORMAT_ERROR, baseline=self.config.baseline,
                                              reason=item.reason, problem=key[0]))
            else:
                outcomes.append(work[(*key, item.source_hash)].result())
        self.last = outcomes
        self._log(outcomes)
        return outcomes

    def score_source(self, problem: str | Path, source: str, entry: str = "Model") -> RewardOutcome:
        """Score one candidate source (no extraction); the evaluator is cached."""
        return self._score_source((self._resolve(problem), entry), source)

    def _score_source(self, key: tuple[str, str], source: str) -> RewardOutcome:
        cache_key = (*key, source_hash(source))
        with self._lock:
            hit = self._cache.get(cache_key)
            if hit is not None:
                self._cache.move_to_end(cache_key)
                return RewardOutcome(**{**hit.__dict__, "cached": True})
        ev = self.evaluator(*key)
        prebuild = getattr(ev, "prebuild", None)
        if prebuild is not None and self._device_lock(ev) is not _NO_LOCK:
            with getattr(ev, "_lock", _NO_LOCK):  # load_inline builds start on CPU cores while the GPU is busy
                prebuild(source)
        with self._slots[key], self._serial[key], self._device_lock(ev):
            result = ev.evaluate(source)
        outcome = score_record(result, self.config)
        if self.config.cache_size > 0:
            with self._lock:
                self._cache[cache_key] = outcome
                while len(self._cache) > self.config.cache_size:
                    self._cache.popitem(last=False)
        return outcome

    def _device_lock(self, ev: Any):
        if self.config.exclusive_timing and self.config.timing and str(ev.device).startswith("cuda"):
            return self._devices[str(ev.device)]
        return _NO_LOCK

    # evaluators ------------------------------------------------------------------------------
    def evaluator(self, problem: str | Path, entry: str = "Model") -> Any:
        """The warm Evaluator of a problem (created on first use, kept until close())."""
        from tools.evaluate import EvalOptions, Evaluator

        key = (self._resolve(problem), entry)
        ev = self._evaluators.get(key)
        if ev is not None:
            return ev
        with self._creating[key]:
            ev = self._evaluators.get(key)
            if ev is None:
                if self._closed:
                    raise RuntimeError("the reward was closed")
                options = EvalOptions(device=self.config.device, trials=self.config.trials, timing=self.config.timing,
                                      spares=max(1, self.config.spares), **self.config.eval_options)
                ev = Evaluator(key[0], options, entry=entry)  # raises ProblemError for a bad problem file
                self._slots[key] = threading.BoundedSemaphore(max(1, self.config.spares))
                self._serial[key] = threading.Lock() if _cache_too_small(ev) else _NO_LOCK
                self._evaluators[key] = ev
        return ev

    def _resolve(self, problem: str | Path) -> str:
        path = Path(problem)
        if not path.is_absolute() and self.config.problem_root:
            path = Path(self.config.problem_root) / path
        return str(path.resolve())

    def _ensure_pool(self, problems: int) -> None:
        wanted = self.config.max_workers or min(32, max(1, self.config.spares) * max(1, problems) + problems)
        with self._lock:
            if self._closed:
                raise RuntimeError("the reward was closed")
            if self._pool is None or wanted > self._pool_size:
                if self._pool is not None:
                    self._pool.shutdown(wait=False)  # queued jobs still run; new ones go to the bigger pool
                self._pool, self._pool_size = ThreadPoolExecutor(wanted, thread_name_prefix="ratchet-reward"), wanted

    def _submit(self, fn) -> Future:
        with self._lock:
            if self._pool is None:
                raise RuntimeError("the reward was closed")
            return self._pool.submit(fn)

    def _log(self, outcomes: Iterable[RewardOutcome]) -> None:
        if not self.config.log_path:
            return
        with self._lock, open(self.config.log_path, "a") as f:
            for o in outcomes:
                f.write(json.dumps(o.to_dict(record=False)) + "\n")

    # lifetime --------------------------------------------------------------------------------
    def close(self) -> None:
        """Stop every evaluator's workers (also run at interpreter exit)."""
        with self._lock:
            self._closed = True
            evaluators, self._evaluators = list(self._evaluators.values()), {}
            pool, self._pool = self._pool, None
        if pool is not None:
            pool.shutdown(wait=True)
        closers = [threading.Thread(target=ev.close, name="ratchet-reward-close") for ev in evaluators]
        for t in closers:  # each close waits on its own workers: do them side by side
            t.start()
        for t in closers:
            t.join()

    def __enter__(self) -> "KernelReward":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class _NoLock:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> None:
        return None


_NO_LOCK = _NoLock()


def _cache_too_small(ev: Any) -> bool:
    """Whether the evaluator's reference-output cache cannot hold every trial's outputs at once.

    Then concurrent evaluations would keep evicting each other's reference outputs (the reference
    recomputes them, and the evicted copies other threads still hold exceed the budget), so this
    problem's evaluations run one at a time."""
    need = (ev.problem.input_bytes + ev.problem.output_bytes) * len(ev.seeds) * len(ev.distributions)
    return need > (ev.options.reference_cache_mb << 20)


def make_reward(**config: Any) -> KernelReward:
    """`KernelReward(RewardConfig(**config))`, for trainer configs that take a factory."""
    return KernelReward(RewardConfig(**config))
