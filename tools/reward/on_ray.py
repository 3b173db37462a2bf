"""The RL reward on a Ray cluster: `RayKernelReward`, a pool of actors each holding a KernelReward.

A trainer on one host scores a batch of completions on many GPUs:

    reward = make_reward(RewardConfig(executor="ray", ray_address="auto", actors=8))
    reward(prompts, completions, problem=[...], **other_columns) -> list[float]

It has the signature, the outcomes (`reward.last`, records included) and the fault handling of
`tools.reward.kernel_reward.KernelReward`: extraction and format errors are decided here, on the driver; every
distinct (problem, entry, source) is evaluated by one actor, whose own KernelReward keeps warm
evaluators (one per problem, at most `max_problems` of them, the least recently used closed
first). Each actor holds one GPU (`num_gpus=1`; it sees it as cuda:0), or one CPU on device
"cpu" (the Triton interpreter).

Problem sources travel as text, never as paths: the driver reads each problem file and sends its
text with its file name and entry; an actor writes it into a private scratch directory, keyed by
the text's hash, and evaluates there. Outcomes name the driver's path, as a local reward's do.

Routing (`route`): the completions of one problem go to the same actors every time, so their
evaluators stay warm: a problem's home actor comes from the hash of its text; when a batch has
fewer problems than actors, each problem's sources are spread over consecutive actors from its
home. Scores come back in the input order, one float each.

Faults: an actor that dies is restarted by Ray (`ray_max_restarts`) and its calls retried. A call
that still fails, or that does not answer within `ray_timeout_s` (that actor is then killed and
restarted), scores each of its completions as an evaluator fault (`fault_reward`,
`evaluator_fault=True`), logged on the `ratchet.reward` logger; nothing raises. What raises is the
caller's mistake, as for KernelReward: a problem file that is unreadable or not a valid problem
(`ProblemError`, naming the driver's file), a bad device (when the reward is made), no cluster at
`ray_address`, or Ray not installed (`pip install -e '.[ray]'`).
"""
from __future__ import annotations

import atexit
import hashlib
import logging
import os
import shutil
import tempfile
import threading
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any, Sequence

from tools.problem import ProblemError
from tools.record import describe_exception
from tools.reward.kernel_reward import KernelReward, RewardClosed, RewardFunction
from tools.reward.score import RewardConfig, RewardOutcome, fault_outcome
from tools.toolcalls import source_hash

log = logging.getLogger("ratchet.reward")
INSTALL_HINT = "pip install -e '.[ray]'"
CLOSE_TIMEOUT_S = 120.0


class RayUnavailable(ImportError):
    """Ray is not installed here, and the config asks for executor="ray"."""


@dataclass(frozen=True)
class ProblemText:
    """A problem as it travels to an actor: its source text, file name and entry class."""

    text: str
    name: str  # the file name the problem is written under (its stem names the problem)
    entry: str
    origin: str  # the driver's path, for outcomes and messages; never opened on an actor
    digest: str  # sha256 of the text: the actor's scratch directory, and the routing key


def import_ray() -> Any:
    try:
        import ray
    except ImportError as exc:
        raise RayUnavailable(f"RewardConfig(executor='ray') needs Ray, which is not installed ({exc}): "
                             f"{INSTALL_HINT}") from None
    return ray


def route(keys: Sequence[tuple[str, int]], actors: int) -> list[int]:
    """The actor of each job, given as (problem digest, job count of that problem so far): each
    problem starts at its home actor (from its digest) and spreads over the next ones when the
    batch has fewer problems than actors."""
    problems = list(dict.fromkeys(digest for digest, _ in keys))
    width = max(1, actors // max(1, len(problems)))
    return [(int(digest[:12], 16) + index % width) % actors for digest, index in keys]


class RewardActor:
    """One Ray actor's side: a KernelReward over problem files written from text into scratch."""

    def __init__(self, config: RewardConfig) -> None:
        self.scratch = Path(tempfile.mkdtemp(prefix="ratchet-reward-"))
        self.error: Exception | None = None
        try:
            self.reward: KernelReward | None = KernelReward(config)
        except Exception as exc:  # noqa: BLE001 - kept, and raised by ready(): the driver shows it as the caller's mistake
            self.reward, self.error = None, exc

    def ready(self) -> int:
        if self.error is not None:
            raise self.error
        return os.getpid()

    def score(self, problems: dict[str, ProblemText], jobs: list[tuple[str, str]]) -> list[RewardOutcome]:
        """Score (problem digest, source) jobs; outcomes name each problem's origin."""
        if self.reward is None:
            raise RuntimeError(f"the actor's reward could not be made: {self.error}")
        paths = {digest: self._write(problem) for digest, problem in problems.items()}
        try:
            outcomes = self.reward.score_sources([(paths[d], problems[d].entry, s) for d, s in jobs])
        except ProblemError as exc:
            message = str(exc)
            for digest, path in paths.items():
                message = message.replace(str(path), problems[digest].origin)
            raise ProblemError(message) from None
        return [_renamed(o, str(paths[d]), problems[d].origin) for o, (d, _) in zip(outcomes, jobs)]

    def warm_problems(self) -> list[str]:
        """The file names of the problems whose evaluators are warm, least recently used first."""
        return [Path(path).name for path, _ in self.reward.warm_problems()] if self.reward else []

    def close(self) -> None:
        if self.reward is not None:
            self.reward.close()
        shutil.rmtree(self.scratch)  # a failure reaches the driver, which logs it

    def _write(self, problem: ProblemText) -> Path:
        path = self.scratch / problem.digest[:24] / problem.name
        if not path.exists():
            path.parent.mkdir(parents=True, exist_ok=True)
            partial = path.with_suffix(".partial")
            partial.write_text(problem.text)
            partial.replace(path)
        return path


def _renamed(outcome: RewardOutcome, path: str, origin: str) -> RewardOutcome:
    """The outcome as the driver's own KernelReward would give it: naming the driver's file."""
    record = outcome.record
    if record is not None and record.get("problem") == path:
        record = {**record, "problem": origin}
    return replace(outcome, problem=origin if outcome.problem == path else outcome.problem, record=record)


class RayKernelReward(RewardFunction):
    """KernelReward's signature and outcomes, over a pool of Ray actors. Thread-safe."""

    def __init__(self, config: RewardConfig | None = None, **overrides: Any) -> None:
        config = config or RewardConfig(executor="ray")
        if overrides:
            config = RewardConfig(**{**asdict(config), **overrides})
        ray = import_ray()
        self.config = config
        self.__name__ = "ratchet_kernel_reward"
        self.last: list[RewardOutcome] = []
        self._lock = threading.Lock()
        self._closed = False
        self._owns_connection = _connect(ray, config.ray_address)
        device, options = _actor_options(ray, config)
        actor_config = replace(config, executor="local", device=device, log_path=None, problem_root=None)
        actor_class = ray.remote(RewardActor)
        self.actors = [actor_class.options(**options).remote(actor_config) for _ in range(config.actors)]
        atexit.register(self.close)
        try:
            self.pids = ray.get([a.ready.remote() for a in self.actors], timeout=config.ray_timeout_s)
        except ray.exceptions.RayTaskError as exc:  # the actor's KernelReward refused the config (device, sandbox)
            self.close()
            raise exc.cause from None
        except ray.exceptions.GetTimeoutError:
            self.close()
            raise TimeoutError(f"{config.actors} reward actors did not start within ray_timeout_s="
                               f"{config.ray_timeout_s} (cluster resources: {ray.cluster_resources()})") from None
        except ray.exceptions.RayError:  # an actor could not even be made (e.g. tools not importable on its node)
            self.close()
            raise

    # scoring ---------------------------------------------------------------------------------
    def score_sources(self, items: Sequence[tuple[str | Path, str, str]]) -> list[RewardOutcome]:
        """Score (problem, entry, source) triples on the actors; outcomes in order."""
        import ray

        if self._closed:
            raise RewardClosed("the reward was closed")
        problems: dict[tuple[str, str], ProblemText] = {}
        for problem, entry, _ in items:
            key = (self._resolve(problem), entry or "Model")
            if key not in problems:
                problems[key] = _read_problem(*key)
        jobs: dict[tuple[str, str, str], tuple[ProblemText, str]] = {}
        for problem, entry, source in items:
            key = (self._resolve(problem), entry or "Model")
            jobs.setdefault((*key, source_hash(source)), (problems[key], source))
        seen: dict[str, int] = {}
        keys = []
        for text, _ in jobs.values():
            keys.append((text.digest, seen.get(text.digest, 0)))
            seen[text.digest] = keys[-1][1] + 1
        per_actor: dict[int, list[tuple[str, str, str]]] = {}
        for job, actor in zip(jobs, route(keys, len(self.actors))):
            per_actor.setdefault(actor, []).append(job)
        calls = {}
        for actor, batch in per_actor.items():
            texts = {jobs[j][0].digest: jobs[j][0] for j in batch}
            calls[actor] = self.actors[actor].score.remote(texts, [(jobs[j][0].digest, jobs[j][1]) for j in batch])
        deadline = None if self.config.ray_timeout_s is None else time.monotonic() + self.config.ray_timeout_s
        scored: dict[tuple[str, str, str], RewardOutcome] = {}
        for actor, ref in calls.items():
            batch = per_actor[actor]
            try:
                outcomes = ray.get(ref, timeout=None if deadline is None else max(0.0, deadline - time.monotonic()))
            except ray.exceptions.RayTaskError as exc:
                if isinstance(exc.cause, ProblemError):  # the dataset's error: the caller's to see
                    raise exc.cause from None
                outcomes = self._faults(exc, batch, jobs, actor, "the actor's evaluation failed")
            except ray.exceptions.GetTimeoutError as exc:
                ray.kill(self.actors[actor], no_restart=False)  # unblocks it; Ray starts it again
                outcomes = self._faults(exc, batch, jobs, actor, f"no answer within ray_timeout_s="
                                        f"{self.config.ray_timeout_s} (the actor is restarted)")
            except Exception as exc:  # noqa: BLE001 - the actor died for good, or any other Ray failure: a fault
                outcomes = self._faults(exc, batch, jobs, actor, "the actor could not answer")
            scored.update(zip(batch, outcomes))
        return [scored[(self._resolve(p), e or "Model", source_hash(s))] for p, e, s in items]

    def _faults(self, exc: Exception, batch: list[tuple[str, str, str]], jobs: dict, actor: int,
                what: str) -> list[RewardOutcome]:
        log.warning("reward actor %d: %s (%s); its %d evaluations score as evaluator faults (reward %s, "
                    "evaluator_fault=True)", actor, what, describe_exception(exc), len(batch),
                    self.config.fault_reward, exc_info=exc)
        return [fault_outcome(exc, jobs[j][0].origin, jobs[j][1], self.config) for j in batch]

    def warm_problems(self) -> list[list[str]]:
        """Per actor, the file names of its warm problems (least recently used first)."""
        import ray

        return ray.get([a.warm_problems.remote() for a in self.actors], timeout=CLOSE_TIMEOUT_S)

    # lifetime --------------------------------------------------------------------------------
    def close(self) -> None:
        """Close every actor's evaluators and stop the actors (also run at interpreter exit)."""
        import ray

        with self._lock:
            if self._closed:
                return
            self._closed = True
        actors = getattr(self, "actors", [])
        if not ray.is_initialized():
            return  # the cluster connection is gone, and the actors with it
        if actors:
            done, pending = ray.wait([a.close.remote() for a in actors], num_returns=len(actors),
                                     timeout=CLOSE_TIMEOUT_S)
            for ref in done:
                try:
                    ray.get(ref)
                except ray.exceptions.RayError as exc:
                    log.warning("a reward actor could not close its evaluators (%s)", describe_exception(exc))
            if pending:
                log.warning("%d reward actors did not close within %ss; killed", len(pending), CLOSE_TIMEOUT_S)
        for actor in actors:
            ray.kill(actor)
        if self._owns_connection:
            ray.shutdown()


def _read_problem(path: str, entry: str) -> ProblemText:
    try:
        text = Path(path).read_text()
    except FileNotFoundError:
        raise ProblemError(f"{path}: no such file") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ProblemError(f"{path}: cannot read it ({exc})") from None
    return ProblemText(text=text, name=Path(path).name, entry=entry, origin=path,
                       digest=hashlib.sha256(text.encode()).hexdigest())


def _connect(ray: Any, address: str) -> bool:
    """Connect to (or, for "local", start) the cluster; whether this reward made the connection."""
    if ray.is_initialized():
        return False
    try:
        ray.init(address=address, include_dashboard=False)  # "local": always a new cluster here
    except ConnectionError as exc:
        raise ConnectionError(f"ray_address={address!r}: no Ray cluster there ({exc}); start one with "
                              f"`ray start --head`, or use ray_address='local'") from None
    return True


def _actor_options(ray: Any, config: RewardConfig) -> tuple[str, dict[str, Any]]:
    """The device each actor evaluates on, and its resources: one GPU (seen as cuda:0), or on
    device "cpu" (or no GPU in the cluster, with device None) one CPU and the Triton interpreter."""
    device = config.device
    if device is None:
        device = "cuda:0" if ray.cluster_resources().get("GPU", 0) >= 1 else "cpu"
    restarts = dict(max_restarts=config.ray_max_restarts, max_task_retries=config.ray_max_restarts)
    if device == "cpu":
        return "cpu", dict(num_cpus=1, num_gpus=0, runtime_env={"env_vars": {"TRITON_INTERPRET": "1"}}, **restarts)
    if device.startswith("cuda"):
        return "cuda:0", dict(num_cpus=1, num_gpus=1, **restarts)
    return device, dict(num_cpus=1, **restarts)  # the actor's KernelReward says what is wrong with it
