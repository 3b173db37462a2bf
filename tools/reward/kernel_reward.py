"""The evaluator as a reinforcement-learning reward: `KernelReward`, over warm evaluators.

The formula and its settings are in tools/reward/score.py (`RewardConfig`, `score_record`);
what counts as a candidate in a completion is in tools/reward/extract.py (`extract_source`).

The callable `KernelReward` has the reward-function signature of TRL's GRPOTrainer:

    reward = KernelReward(RewardConfig(device="cuda:0"))
    reward(prompts, completions, problem=[...], **other_columns) -> list[float]

`completions` are strings or lists of chat messages; the problem file of each completion comes
from a dataset column (`problem` by default; `entry` names a class other than `Model`). One
Evaluator per problem is kept warm (`spares` candidate workers started ahead of need) for the
reward's lifetime and closed at exit; `max_problems` bounds how many stay warm (the least
recently used idle one is closed first; one still evaluating is never closed). Distinct completions are scored in parallel in a thread
pool; identical ones (same problem and source hash) are evaluated once, and recent outcomes are
cached. On a GPU with timing on, evaluations on one device run one at a time by default
(`exclusive_timing`), so that concurrent kernels do not perturb each other's timings (CUDA C++
candidates start their load_inline builds on CPU cores first, `Evaluator.prebuild`); on the CPU
(nothing is timed) they run concurrently, at most `spares` per problem. `Evaluator.evaluate` is
thread-safe (a lock guards the shared reference worker and the spare pool).

Every completion gets a number. Whatever the completion or the evaluator does, nothing raises:
an exception out of `Evaluator(...)` (other than a bad problem file) or out of `evaluate()` is an
evaluator fault, scored like a record with verdict error (`RewardConfig.fault_reward`, neutral,
with `evaluator_fault=True`; see tools/reward/score.py), logged as a warning on the
`ratchet.reward` logger with its traceback, and never cached, so the same completion is evaluated
again next time. What does raise is the caller's mistake: a problem file that is not a valid
problem (`ProblemError`, naming the file: the dataset's error, to be fixed, not trained on), a
missing `problem` column, a bad `RewardConfig` (device, `eval_options`: checked when the reward is
made), or a call after `close()`.

`make_reward` makes the reward a config asks for: this one, or with `executor="ray"` a pool of
Ray actors with the same signature (tools/reward/on_ray.py).

No agent imports: an RL trainer needs only `tools`.
"""
from __future__ import annotations

import atexit
import collections
import json
import logging
import threading
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any, Iterable, Sequence

from tools.problem import ProblemError
from tools.record import describe_exception
from tools.reward.extract import extract_source
from tools.reward.score import FORMAT_ERROR, RewardConfig, RewardOutcome, fault_outcome, score_record
from tools.toolcalls import FormatError, Submission, source_hash

log = logging.getLogger("ratchet.reward")


class RewardClosed(RuntimeError):
    """The reward was closed (`close()`, or interpreter exit): it evaluates nothing more."""


class RewardFunction:
    """What every reward shares: the GRPOTrainer signature over `score_sources`, which a
    subclass implements (`KernelReward` here, `RayKernelReward` on a Ray cluster), and `close`."""

    config: RewardConfig
    last: list[RewardOutcome]
    _lock: threading.Lock

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
        jobs = {(*key, item.source_hash): (key[0], key[1], item.source)
                for key, item in zip(keys, parsed) if isinstance(item, Submission)}
        scored = dict(zip(jobs, self.score_sources(list(jobs.values()))))
        outcomes = [format_outcome(item, key[0], self.config) if isinstance(item, FormatError)
                    else scored[(*key, item.source_hash)] for key, item in zip(keys, parsed)]
        self.last = outcomes
        self._log(outcomes)
        return outcomes

    def score_sources(self, items: Sequence[tuple[str | Path, str, str]]) -> list[RewardOutcome]:
        """Score (problem, entry, source) triples in parallel (no extraction); outcomes in order."""
        raise NotImplementedError

    def score_source(self, problem: str | Path, source: str, entry: str = "Model") -> RewardOutcome:
        """Score one candidate source (no extraction)."""
        return self.score_sources([(problem, entry, source)])[0]

    def _resolve(self, problem: str | Path) -> str:
        path = Path(problem)
        if not path.is_absolute() and self.config.problem_root:
            path = Path(self.config.problem_root) / path
        return str(path.resolve())

    def _log(self, outcomes: Iterable[RewardOutcome]) -> None:
        if not self.config.log_path:
            return
        with self._lock, open(self.config.log_path, "a") as f:
            for o in outcomes:
                f.write(json.dumps(o.to_dict(record=False)) + "\n")

    # lifetime --------------------------------------------------------------------------------
    def close(self) -> None:
        raise NotImplementedError

    def __enter__(self) -> "RewardFunction":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class KernelReward(RewardFunction):
    """A GRPOTrainer-style reward function over warm evaluators (one per problem). Thread-safe."""

    def __init__(self, config: RewardConfig | None = None, **overrides: Any) -> None:
        config = config or RewardConfig()
        if overrides:
            config = RewardConfig(**{**asdict(config), **overrides})
        if config.executor != "local":
            raise ValueError(f"KernelReward evaluates in this process; for executor={config.executor!r} "
                             "use tools.reward.make_reward(config)")
        self.config = config
        self._options = self._eval_options(config)  # a bad device or eval_options raises here, not per completion
        self.__name__ = "ratchet_kernel_reward"  # trainers log rewards under the function's name
        self._evaluators: collections.OrderedDict[tuple[str, str], Any] = collections.OrderedDict()  # LRU first
        self._users: collections.Counter[tuple[str, str]] = collections.Counter()  # evaluations under way
        self._creating: dict[tuple[str, str], threading.Lock] = collections.defaultdict(threading.Lock)
        self._slots: dict[tuple[str, str], threading.BoundedSemaphore] = {}
        self._serial: dict[tuple[str, str], Any] = {}  # a Lock, or _NO_LOCK where evaluations may overlap
        self._devices: dict[str, threading.Lock] = collections.defaultdict(threading.Lock)
        self._cache: collections.OrderedDict[tuple[str, str, str], RewardOutcome] = collections.OrderedDict()
        self._lock = threading.Lock()
        self._pool: ThreadPoolExecutor | None = None
        self._pool_size = 0
        self._closed = False
        self.last: list[RewardOutcome] = []  # the outcomes of the latest call, in order
        atexit.register(self.close)

    # scoring ---------------------------------------------------------------------------------
    def score_sources(self, items: Sequence[tuple[str | Path, str, str]]) -> list[RewardOutcome]:
        """Score (problem, entry, source) triples in parallel (no extraction); outcomes in order."""
        keys = [(self._resolve(p), e or "Model") for p, e, _ in items]
        distinct = list(dict.fromkeys(keys))
        self._ensure_pool(len(distinct))
        bound = self.config.max_problems or len(distinct)
        for key in distinct[:bound]:  # evaluators start together (their workers load in parallel), within the bound
            self._submit(lambda key=key: self.evaluator(*key))
        work: dict[tuple[str, str, str], Future] = {}
        for key, (_, _, source) in zip(keys, items):
            job = (*key, source_hash(source))
            if job not in work:
                work[job] = self._submit(lambda key=key, source=source: self._score_source(key, source))
        return [work[(*key, source_hash(source))].result() for key, (_, _, source) in zip(keys, items)]

    def _score_source(self, key: tuple[str, str], source: str) -> RewardOutcome:
        digest = source_hash(source)
        cache_key = (*key, digest)
        with self._lock:
            hit = self._cache.get(cache_key)
            if hit is not None:
                self._cache.move_to_end(cache_key)
                return RewardOutcome(**{**hit.__dict__, "cached": True})
        try:
            evaluator = self._lease(key)
        except (ProblemError, RewardClosed):  # the dataset's error, or a closed reward: the caller's to see
            raise
        except Exception as exc:  # noqa: BLE001 - the evaluator could not start: our fault, never the completion's
            return self._fault(exc, key, source, "the evaluator could not start")
        try:
            outcome = score_record(self._evaluate(evaluator, key, source), self.config)
        except Exception as exc:  # noqa: BLE001 - evaluate() raised: an evaluator fault, whatever its type
            return self._fault(exc, key, source, "the evaluation failed")
        finally:
            self._release(key)
        if outcome.evaluator_fault:  # not a property of the source: evaluate it again next time
            return outcome
        if self.config.cache_size > 0:
            with self._lock:
                self._cache[cache_key] = outcome
                while len(self._cache) > self.config.cache_size:
                    self._cache.popitem(last=False)
        return outcome

    def _evaluate(self, evaluator: Any, key: tuple[str, str], source: str) -> Any:
        prebuild = getattr(evaluator, "prebuild", None)
        if prebuild is not None and self._device_lock(evaluator.device) is not _NO_LOCK:
            prebuild(source)  # load_inline builds start on CPU cores while the GPU is busy
        with self._slots[key], self._serial[key], self._device_lock(evaluator.device):
            return evaluator.evaluate(source)

    def _fault(self, exc: Exception, key: tuple[str, str], source: str, what: str) -> RewardOutcome:
        log.warning("%s for %s (%s); scored as an evaluator fault (reward %s, evaluator_fault=True)",
                    what, key[0], describe_exception(exc), self.config.fault_reward, exc_info=exc)
        return fault_outcome(exc, key[0], source, self.config)

    def _device_lock(self, device: str):
        if self.config.exclusive_timing and self.config.timing and str(device).startswith("cuda"):
            return self._devices[str(device)]
        return _NO_LOCK

    # evaluators ------------------------------------------------------------------------------
    def evaluator(self, problem: str | Path, entry: str = "Model") -> Any:
        """The warm Evaluator of a problem (created on first use, kept until close(), or until
        `max_problems` others were used more recently and it is idle)."""
        from tools.evaluate import Evaluator

        key = (self._resolve(problem), entry)
        with self._lock:
            evaluator = self._evaluators.get(key)
            if evaluator is not None:
                self._evaluators.move_to_end(key)
                return evaluator
        with self._creating[key]:
            with self._lock:
                evaluator = self._evaluators.get(key)
            if evaluator is None:
                if self._closed:
                    raise RewardClosed("the reward was closed")
                # opened alone on the device: the evaluator times eager on a quiet device and decides
                # where float64 fits when it opens, and another problem's completion running beside
                # it would make eager look slower and the memory look full; then the eager and
                # torch.compile baselines, before any completion's code runs (measured beside a
                # completion's worker, the compile time, kept on disk for every later completion,
                # would be whatever that worker let it be)
                with self._device_lock(self._options.device):
                    evaluator = Evaluator(key[0], replace(self._options), entry=entry)  # ProblemError: a bad file
                    try:
                        evaluator.baseline()
                    except BaseException:
                        evaluator.close()
                        raise
                self._slots[key] = threading.BoundedSemaphore(max(1, self.config.spares))
                self._serial[key] = _NO_LOCK if evaluator.keeps_every_trial_output() else threading.Lock()
                with self._lock:
                    self._evaluators[key] = evaluator
                self._trim()
        return evaluator

    def warm_problems(self) -> list[tuple[str, str]]:
        """The (problem, entry) keys of the warm evaluators, least recently used first."""
        with self._lock:
            return list(self._evaluators)

    def _lease(self, key: tuple[str, str]) -> Any:
        """The key's evaluator, marked in use (never closed by the bound) until `_release(key)`."""
        while True:
            evaluator = self.evaluator(*key)
            with self._lock:
                if self._evaluators.get(key) is evaluator:  # not evicted between its creation and now
                    self._users[key] += 1
                    return evaluator

    def _release(self, key: tuple[str, str]) -> None:
        with self._lock:
            self._users[key] -= 1
        self._trim()

    def _trim(self) -> None:
        """Close the least recently used idle evaluators past `max_problems`."""
        bound = self.config.max_problems
        if bound is None:
            return
        with self._lock:  # the most recent is kept even past the bound: it was made or used just now
            idle = [k for k in list(self._evaluators)[:-1] if self._users[k] <= 0]
            victims = [(k, self._evaluators.pop(k)) for k in idle[:max(0, len(self._evaluators) - bound)]]
        for key, evaluator in victims:
            log.info("closing the warm evaluator of %s (more than max_problems=%d)", key[0], bound)
            evaluator.close()

    @staticmethod
    def _eval_options(config: RewardConfig) -> Any:
        from tools.options import EvalOptions, resolved
        from tools.sandbox import Sandbox

        options = resolved(EvalOptions(device=config.device, trials=config.trials, timing=config.timing,  # ValueError now
                                       precision=config.precision, spares=max(1, config.spares), **config.eval_options))
        Sandbox(options.sandbox)  # SandboxUnavailable now (the trainer's machine), not per completion
        return options

    def _ensure_pool(self, problems: int) -> None:
        wanted = self.config.max_workers or min(32, max(1, self.config.spares) * max(1, problems) + problems)
        with self._lock:
            if self._closed:
                raise RewardClosed("the reward was closed")
            if self._pool is None or wanted > self._pool_size:
                if self._pool is not None:
                    self._pool.shutdown(wait=False)  # queued jobs still run; new ones go to the bigger pool
                self._pool, self._pool_size = ThreadPoolExecutor(wanted, thread_name_prefix="ratchet-reward"), wanted

    def _submit(self, fn) -> Future:
        with self._lock:
            if self._pool is None:
                raise RewardClosed("the reward was closed")
            return self._pool.submit(fn)

    # lifetime --------------------------------------------------------------------------------
    def close(self) -> None:
        """Stop every evaluator's workers (also run at interpreter exit)."""
        with self._lock:
            self._closed = True
            evaluators, self._evaluators = list(self._evaluators.values()), collections.OrderedDict()
            pool, self._pool = self._pool, None
        if pool is not None:
            pool.shutdown(wait=True)
        closers = [threading.Thread(target=evaluator.close, name="ratchet-reward-close") for evaluator in evaluators]
        for t in closers:  # each close waits on its own workers: do them side by side
            t.start()
        for t in closers:
            t.join()


class _NoLock:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> None:
        return None


_NO_LOCK = _NoLock()


def format_outcome(error: FormatError, problem: str, config: RewardConfig) -> RewardOutcome:
    """The outcome of a completion with no candidate in it: reward 0, verdict format_error."""
    return RewardOutcome(reward=0.0, verdict=FORMAT_ERROR, baseline=config.baseline, reason=error.reason,
                         problem=problem)
