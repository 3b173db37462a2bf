"""The evaluator's entry points: `Evaluator(problem).evaluate(source) -> Result`.

The trusted parent (this process) never imports candidate code. An Evaluator keeps one reference
worker per problem (the problem's Model; the only process that knows the secret seeds and makes
every input), and gives each candidate a fresh worker confined by the operating system
(tools/sandbox/), spawned ahead of need so CUDA start-up is off the critical path (workers come
from tools/processes/spawner.py; with `pool=`, from a warm pool started before the problem was
known, tools/processes/warm.py).

What an evaluation does, in order, and where its verdict is decided: tools/pipeline.py.
The steps see this evaluator only through its bench (tools/judge/bench.py); this module owns
the processes, their lifecycle, and the faults that are ratchet's own (verdict `error`).
"""
from __future__ import annotations

import random
import secrets
import shutil
import threading
import time
import traceback
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tools import precision
from tools.env import environment
from tools import pipeline
from tools.judge.bench import Bench, reply_cap
from tools.judge.distributions import Distributions
from tools.judge.evaluation import Evaluation
from tools.selfcheck import let_go, without_candidate
from tools.judge.verdict import Failure, decide, fault, passed, pending
from tools.options import EvalOptions, resolved
from tools.problem import ProblemError, ProblemInfo, read_problem
from tools.processes import builds
from tools.processes.spares import Spares
from tools.processes.process import WorkerGone, WorkerProcess
from tools.processes.reference import Reference, ReferenceLost
from tools.processes.spawner import Spawner
from tools.record import Result, TimeStats, Verdict, describe_exception
from tools.timing import baselines, blocks, quiet
from tools.timing.plan import plan

if TYPE_CHECKING:
    from tools.counters.measure import Counters
    from tools.processes.warm import WarmPool

__all__ = ["EvalOptions", "Evaluator", "evaluate"]


class Evaluator:
    def __init__(self, problem_path: Path | str, options: EvalOptions | None = None, entry: str = "Model",
                 pool: "WarmPool | None" = None) -> None:
        """`pool`: a warm pool (tools/processes/warm.py) whose workers, started before this problem was known,
        this evaluator takes first, and to which it gives its unused ones back when it closes; its
        options must agree with `options` where workers depend on them (ValueError otherwise)."""
        given = options or EvalOptions()
        precision.check(given.precision)  # PrecisionError (a ValueError): refuse before any worker starts
        self.options = resolved(given)  # the device and cache directory, once (DeviceError, a ValueError)
        self.device: str = self.options.device  # type: ignore[assignment]  # resolved: never None
        self.problem: ProblemInfo = read_problem(Path(problem_path), entry)
        if pool is not None:
            pool.check(self.options)
        self.pool = pool
        # SandboxUnavailable: refuse now
        self.spawner: Spawner = pool.spawner if pool is not None else Spawner(self.options)
        self.sandbox, self.root = self.spawner.sandbox, self.spawner.root
        run_seed = self.options.seed if self.options.seed is not None else secrets.randbits(62)
        rng = random.Random(run_seed)
        self.seeds = [rng.getrandbits(62) for _ in range(max(1, self.options.trials))]
        self._spares = Spares(self._candidate_worker)
        self._scratches: list[Path] = []  # with a pool: the scratch directories of the workers this evaluator used
        self._baseline: dict[str, Any] | None = None
        self._in_flight = 0  # evaluations running now (threads): the device is quiet only with none
        # evaluate() may run in several threads at once (RL rewards): this guards what they share,
        # the reference worker (and its output cache) and the pool of spare candidate workers
        self._lock = threading.RLock()
        self.builds = builds.Builds(self.device, self.spawner.artifacts, self.spawner.toolchain, self.options,
                                    spawn=lambda: self._spawn("candidate", "build"), reply_cap=self._reply_cap)
        try:
            self.reference = Reference(self.problem, self._reference_worker, self._start, self.options.build_timeout)
            self._spares.add(self.options.spares)  # they start while the reference loads
            self.reference.build()
            # the second clock's copy charge (tools/timing/clocks.py), measured before any candidate runs
            timed = self.options.timing and self.device.startswith("cuda")
            copy_ms_per_byte = self.spawner.copy_ms_per_byte() if timed else None
            self.bench = Bench(problem=self.problem, options=self.options, device=self.device, seeds=self.seeds,
                               reference=self.reference, lock=self._lock,
                               distributions=Distributions(self.problem.inputs), builds=self.builds,
                               environment=environment(self.device), cache_dir=self.spawner.cache_dir,
                               copy_ms_per_byte=copy_ms_per_byte, take_worker=self._take_worker)
            self.bench.decide_distributions()  # before any candidate (tools/judge/bench.py)
            self.bench.decide_float64()  # ... and where the float64 evaluation fits
            self.reference.float64_strict = True  # from now on a candidate may hold the device's memory
            if self.bench.timed:
                self._quiet()  # eager on a quiet device, before any candidate (tools/timing/quiet.py)
        except (WorkerGone, ReferenceLost) as exc:
            self.close()
            raise ProblemError(f"{self.problem.path.name}: {exc}") from None
        except BaseException:  # a ProblemError; an interrupt (a Ray slot's) or a fault: no worker is left running
            self.close()
            raise

    # lifecycle --------------------------------------------------------------------------
    def __enter__(self) -> "Evaluator":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        spares = self._spares.drain()
        if self.pool is not None:  # never handed a candidate: the next problem's evaluator may take them
            kept = self.pool.give_back(spares)
            spares = [proc for proc in spares if proc not in kept]
            self._scratches = [path for path in self._scratches if all(path != Spawner.scratch_of(p) for p in kept)]
        for proc in (getattr(self, "reference", None), *spares):
            if proc is not None:
                proc.close()
        self.builds.close()
        if self.pool is None:
            self.spawner.close()
        else:
            for path in self._scratches:
                shutil.rmtree(path, ignore_errors=True)
            self._scratches.clear()

    def baseline(self) -> dict[str, Any]:
        """Eager and torch.compile times and the roofline floor of the problem, before any
        candidate (on a GPU; bytes and flops only elsewhere). Measured once per evaluator."""
        with self._lock:
            if self._baseline is None:
                self._baseline = baselines.baselines(self.bench)
            return dict(self._baseline)

    def prebuild(self, source: str) -> bool:
        """Start building a CUDA C++ candidate's load_inline extensions now, in a build sandbox
        without a GPU, while the GPU evaluates something else; evaluate(source) later waits for
        it. True if a build was started."""
        with self._lock:  # not while another thread times on this evaluator's reference
            return self.builds.start(source)

    def counters(self, source: str) -> "Counters":
        """Hardware counters of `source`'s kernels in one forward, read by Nsight Compute inside the
        candidate's own sandbox (tools/counters/): advice for the model, never a verdict, and an
        answer saying why not where they cannot be read confined. Never raises for what the
        candidate does."""
        from tools.counters.measure import Counters, measure

        def spawn(wrapper: Any) -> WorkerProcess:
            proc = self.spawner.spawn("candidate", "run", wrapper=wrapper)
            if self.pool is not None:
                self._scratches.append(Spawner.scratch_of(proc))
            proc.max_reply_bytes = self._reply_cap()
            return proc

        with self._lock:
            self._in_flight += 1  # a candidate's worker is about: no quiet re-measure meanwhile
        try:
            found = measure(self.bench, spawn, self._new_result, source,
                            sandboxed=bool(self.spawner.sandbox.mechanisms.bwrap))
        except Exception as exc:  # noqa: BLE001 - advice, not a verdict: the call says why, the run goes on
            return Counters(False, f"the evaluator could not read the counters: {_cause(exc)}")
        finally:
            with self._lock:
                self._in_flight -= 1
        # a refusal is not remembered for the next call: it is read from the profiled worker's log, which
        # the candidate writes too (one that printed the driver's refusal switched counters off for every
        # later candidate of the evaluator: an attacker helper's reading, stop 57)
        return found

    def counters_unavailable(self) -> str | None:
        """Why counters() cannot read anything here, known before starting anything (no GPU, no
        bubblewrap, no ncu), or None: an agent offers get_ncu_profile only where this is None."""
        from tools.counters.measure import unavailable

        return unavailable(self.bench, sandboxed=bool(self.spawner.sandbox.mechanisms.bwrap))

    def keeps_every_trial_output(self) -> bool:
        """Whether the reference's output cache holds every trial's outputs at once. Where it
        cannot, evaluations running at once would keep evicting each other's reference outputs (the
        reference recomputes them, and the evicted copies other threads still hold exceed the
        budget): a caller evaluating in several threads (the RL reward) runs this problem's one at a time."""
        problem = self.problem
        need = (problem.input_bytes + problem.output_bytes) * len(self.seeds) * len(self.bench.distributions.names)
        return need <= (self.options.reference_cache_mb << 20)

    # what a problem's curation reads (agent/suite/check.py) -------------------------------
    def trial_distribution(self, i: int, seed: int) -> str:
        """The input distribution trial i of this problem uses (tools/judge/distributions.py)."""
        return self.bench.distribution(i, seed)

    @property
    def distributions(self) -> list[str]:
        """The rotation of input distributions this problem allows, as chosen so far."""
        return self.bench.distributions.names

    @property
    def dropped(self) -> dict[str, str]:
        """A distribution this problem does not allow: why."""
        return self.bench.distributions.dropped

    def reference_outputs(self, seed: int, dist: str) -> Any:
        """[outputs, inputs after forward] of the reference on the inputs of (seed, distribution)."""
        return self.bench.reference_outputs(seed, dist)

    def eager_time(self, budget_s: float) -> TimeStats:
        """The eager reference's median time by the evaluator's protocol (fresh inputs, L2 flushed),
        within `budget_s` of measuring."""
        with self._lock:
            return blocks.time_reference(self.bench, plan(self.bench), "model", budget_s=budget_s,
                                         timeout=self.options.trial_timeout)

    # workers --------------------------------------------------------------------------------
    def _spawn(self, role: str, profile_name: str = "run") -> WorkerProcess:
        proc = self.spawner.spawn(role, profile_name)
        if self.pool is not None:
            self._scratches.append(Spawner.scratch_of(proc))
        return proc

    def _adopt(self, proc: WorkerProcess | None, role: str) -> WorkerProcess:
        """A worker from the pool (now this evaluator's), else a new one."""
        if proc is None:
            return self._spawn(role)
        self._scratches.append(Spawner.scratch_of(proc))
        return proc

    def _reference_worker(self) -> WorkerProcess:
        return self._adopt(self.pool.take_reference() if self.pool is not None else None, "reference")

    def _candidate_worker(self) -> WorkerProcess:
        return self._adopt(self.pool.take_candidate() if self.pool is not None else None, "candidate")

    def _start(self, proc: WorkerProcess) -> None:
        ready = proc.wait_ready(self.options.start_timeout)
        if ready.get("op") != "ready":
            raise ProblemError(f"{self.problem.path.name}: {ready.get('message', 'the worker did not start')}".splitlines()[0])

    def _take_worker(self) -> WorkerProcess:
        """A started candidate worker for one evaluation; the next one starts now (ahead of need)."""
        worker = self._spares.take() or self._candidate_worker()
        if self.options.warm and self.options.spares > 0:
            self._spares.replenish()  # in a thread: its start is not on this evaluation's clock
        worker.max_reply_bytes = self._reply_cap()
        return worker

    def _reply_cap(self) -> int:
        return reply_cap(self.problem, self.spawner.artifacts.namespace_cap_bytes)

    def _dispose(self, evaluation: Evaluation) -> None:
        """The used worker is disposable: keep what it compiled (when it ran), then kill and reap it,
        before evaluate() returns. (It was done in a thread after: an attacker helper's worker, asked
        for its files once evaluate() had returned, took the GIL and kept the GPU spinning for the
        request's 30 s, and the next honest candidate on the device was rejected by the second clock.
        The hand-over is charged to the evaluation's deadline, and bounded by ARTIFACT_REQUEST_S.)"""
        worker = evaluation.worker
        if worker is None:
            return
        worker.unmap()
        keep = evaluation.result.ok or evaluation.result.verdict in (Verdict.INCORRECT, Verdict.REJECTED)
        source_hash = evaluation.result.source_hash
        handed = self.builds.handing_over(source_hash) if keep else None
        builds.reap(self.builds, worker, source_hash, keep, handed)

    # evaluation ---------------------------------------------------------------------------
    def evaluate(self, source: str) -> Result:
        """Evaluate one candidate source. Never raises: whatever the candidate does has a verdict,
        and a fault of the evaluator's own (a reference worker that cannot be kept alive, a bug)
        is a result with verdict `error`, never charged to the candidate. A reference worker that
        died is restarted first. A fault while a candidate's worker exists (the reference lost, the
        parent out of device memory, any exception of ours) has the candidate evaluated once more,
        in a fresh worker; a second one is the candidate's (rejected, rule `resource`) when the
        evaluator's own work succeeds with the candidate gone (tools/selfcheck.py), and an
        `error` only when it fails there too."""
        try:
            with self._lock:
                restarted = self._revive_reference()
            try:
                result = self._evaluate_once(source)
            except (ReferenceLost, CandidateRan) as exc:
                let_go(exc)  # nothing of the candidate's memory is held into the retry
                with self._lock:
                    self._revive_reference()
                try:
                    result = self._evaluate_once(source)
                except CandidateRan as again:
                    return self._attribute(source, exc, again)
                passed(result, "reference", f"{_cause(exc)}; restarted, and the candidate evaluated again")
                return result
            if restarted:
                passed(result, "reference", "the reference worker had died; restarted, and its own work redone "
                       "with no candidate running, before this evaluation")
            return result
        except Exception as exc:  # noqa: BLE001 - a fault of ours becomes a result, recorded with its traceback
            exc = exc.cause if isinstance(exc, CandidateRan) else exc
            where = "".join(traceback.format_exception(exc)[-4:])[-2000:]
            return fault(self._new_result(source), describe_exception(exc), where)

    def _revive_reference(self) -> bool:
        """Restart the reference worker if it has died (True if it was), and have the new one redo the
        evaluator's own work before any candidate runs (tools/selfcheck.py: a fresh trial at every size,
        its float64 evaluation, an eager timing). A new worker's device-memory need starts at zero
        (tools/worker/memory.py), and the parent's cached outputs spare it the requests that measure
        it: left so, it would reserve nothing, a candidate could take what its next request needs, and
        that out-of-memory would be charged to the candidate (rule resource) even when the candidate
        only used the card. Work that fails here fails with no candidate: the evaluator's fault."""
        if not self.reference.ensure_alive():
            return False
        why = without_candidate(self.bench)
        if why is not None:
            self.reference.proc.kill()  # restarted, and its need measured, before the next evaluation
            raise RuntimeError(f"the restarted reference worker failed the evaluator's own work, with no "
                               f"candidate running: {why}")
        return True

    def _attribute(self, source: str, first: Exception, again: "CandidateRan") -> Result:
        """Two faults in a row with this candidate's worker running: the candidate's (rule `resource`)
        if the evaluator's own work succeeds without it; else the fault is raised (an `error`)."""
        let_go(first, again)
        with self._lock:
            self.reference.ensure_alive()
            why = without_candidate(self.bench)
        if why is not None:
            raise again.cause
        detail = (f"twice in a row, with this candidate's worker running: {_cause(first)}; then {_cause(again)}; "
                  "with the candidate gone, the evaluator's own work succeeded (a fresh reference trial, its "
                  "device memory, an eager timing)")
        return decide(self._new_result(source), Failure(
            Verdict.REJECTED, "resource", detail,
            f"Rejected (rule resource): the evaluation failed twice while this candidate ran ({_cause(again)}), and "
            "not without it; a kernel must leave the device's memory and the evaluator's processes alone."))

    def _new_result(self, source: str) -> Result:
        env = {**environment(self.device), "sandbox": self.sandbox.isolation()}
        return pending(source, problem=str(self.problem.path), problem_hash=self.problem.hash, environment=env,
                       precision=self.options.precision)

    def _quiet(self) -> None:
        """Time eager on a quiet device: no candidate of this evaluator running (a used worker is
        killed before its evaluate() returns), its spare workers started (a start's GPU work is done)."""
        with self._lock:
            self._spares.settle(self.options.start_timeout)
            quiet.measure(self.bench)

    def _evaluate_once(self, source: str) -> Result:
        started = time.monotonic()
        evaluation = Evaluation(source, self._new_result(source))
        with self._lock:
            if self.bench.recheck_quiet and self._in_flight == 0:  # no candidate of ours is running
                self._quiet()
            self._in_flight += 1
        try:
            return pipeline.run(self.bench, evaluation)
        except Exception as exc:
            if evaluation.worker is None or isinstance(exc, OUR_BUGS):
                raise
            evaluation.worker.kill()  # its device memory freed before anything is tried again
            raise CandidateRan(exc) from exc
        finally:
            try:
                self._dispose(evaluation)
            finally:  # only now is its worker gone: a quiet re-measure may run from here on
                with self._lock:
                    self._in_flight -= 1
            if evaluation.worker is not None and evaluation.worker.allowance is not None:
                evaluation.result.phases["candidate"] = round(evaluation.worker.allowance.spent, 4)
            evaluation.result.phases["total"] = round(time.monotonic() - started, 4)


# exceptions that are ratchet's own mistakes whatever the candidate did: never charged to it (rule
# resource), always an `error` that shows the bug (a candidate's malformed data is refused before it
# can raise these; the self-check would pass, and a bug would silently cost every candidate its reward)
OUR_BUGS = (NameError, AttributeError, AssertionError, ImportError, SyntaxError, NotImplementedError)


class CandidateRan(Exception):
    """A fault of the evaluator's side (the reference lost, an exception of the parent's) raised
    while a candidate's worker existed: whether it is the candidate's doing is decided by
    Evaluator._attribute."""

    def __init__(self, cause: Exception) -> None:
        super().__init__(str(cause))
        self.cause = cause


def _cause(exc: Exception) -> str:
    cause = exc.cause if isinstance(exc, CandidateRan) else exc
    return describe_exception(cause).splitlines()[0][:300]


def evaluate(problem_path: Path | str, source: str, options: EvalOptions | None = None, entry: str = "Model") -> Result:
    """One-shot evaluation; raises ProblemError only for an invalid problem file."""
    with Evaluator(problem_path, options, entry) as evaluation:
        return evaluation.evaluate(source)
