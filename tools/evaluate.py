"""The evaluator's one entry point: `Evaluator(problem).evaluate(source) -> Result`.

The trusted parent (this process) never imports candidate code. It keeps one reference worker
per problem (the problem's Model; the only process that knows the secret seeds and makes every
input), and gives each candidate a fresh worker confined by the operating system
(tools/sandbox/), spawned ahead of need so CUDA start-up is off the critical path (workers come
from tools/processes/spawner.py; with `pool=`, from a warm pool started before the problem was known,
tools/processes/warm.py). Steps: static
checks and guard; for CUDA C++, a build in a sandbox of its own (tools/processes/builds.py); build of the
model; trials (inputs written into the candidate's memory by the parent, three distributions,
poisoned memory; tools/judge/trials.py); the run-time integrity checks; timing (tools/timing/profile.py).
Every check reports through tools/judge/verdict.py, where the first failure decides the verdict.
"""
from __future__ import annotations

import collections
import contextlib
import hashlib
import random
import secrets
import shutil
import threading
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tools import precision

from tools.processes import builds

from tools.timing import profile

from tools.judge import trials
from tools.judge.compare import Tolerance
from tools.env import environment, resolve_device
from tools.problem import ProblemError, ProblemInfo, read_problem
from tools.processes.process import WorkerGone, WorkerProcess
from tools.record import Result, Verdict, describe_exception
from tools.processes.reference import Reference, ReferenceLost
from tools.processes.spawner import Spawner
from tools.judge.static import static_checks
from tools.judge.verdict import fail, passed

if TYPE_CHECKING:
    from tools.processes.warm import WarmPool

WORKER_FAILURES = {v.value: v for v in (Verdict.COMPILE_ERROR, Verdict.RUNTIME_ERROR, Verdict.CRASHED)}
REAP_GRACE_S = 5.0  # at close: how long the last evaluations' workers may still hand over what they compiled


@dataclass
class EvalOptions:
    device: str | None = None  # None: cuda:0 when there is a GPU, else cpu (Triton interpreter)
    trials: int = 5
    timing: bool = True
    precision: str = "fp32"  # float32 arithmetic of the baselines and both workers: fp32 | tf32 (tools/precision.py)
    disabled_rules: frozenset[str] = frozenset()  # guard rules switched off (see docs/evaluator.md)
    tolerances: dict[str, Tolerance] | None = None  # per dtype name, overriding compare.TOLERANCES
    seed: int | None = None  # None: a secret seed per Evaluator (per run)
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
    sandbox: str = "required"  # "required": refuse without full OS confinement; "best-effort": use what there is
    scratch_mb: int = 2048  # a confined worker's /tmp (its scratch) and /dev/shm, each
    max_processes: int = 1024  # processes and threads of one confined worker
    artifact_cache_mb: int = 4096  # build products kept between evaluations (tools/processes/artifacts.py)
    bytecode_cache: str = "auto"  # workers' .pyc where torch has none: "auto", "on", "off" (tools/processes/bytecode.py)
    extra: dict[str, Any] = field(default_factory=dict)


class Evaluator:
    def __init__(self, problem_path: Path | str, options: EvalOptions | None = None, entry: str = "Model",
                 pool: "WarmPool | None" = None) -> None:
        """`pool`: a warm pool (tools/processes/warm.py) whose workers, started before this problem was known,
        this evaluator takes first, and to which it gives its unused ones back when it closes; its
        options must agree with `options` where workers depend on them (ValueError otherwise)."""
        self.options = options or EvalOptions()
        precision.check(self.options.precision)  # PrecisionError (a ValueError): refuse before any worker starts
        self.device = resolve_device(self.options.device)
        self.problem: ProblemInfo = read_problem(Path(problem_path), entry)
        if pool is not None:
            pool.check(self.options)
        self.pool = pool
        # SandboxUnavailable: refuse now
        self.spawner: Spawner = pool.spawner if pool is not None else Spawner(self.options)
        self.device_index = self.spawner.device_index
        self.sandbox, self.cache_dir, self.root = self.spawner.sandbox, self.spawner.cache_dir, self.spawner.root
        self.artifacts, self.toolchain = self.spawner.artifacts, self.spawner.toolchain
        run_seed = self.options.seed if self.options.seed is not None else secrets.randbits(62)
        rng = random.Random(run_seed)
        self.seeds = [rng.getrandbits(62) for _ in range(max(1, self.options.trials))]
        self._spares: collections.deque[WorkerProcess] = collections.deque()
        self._prebuilds: dict[str, WorkerProcess] = {}
        self._reaping: list[tuple[WorkerProcess, threading.Thread]] = []  # used workers not yet killed (builds.reap)
        self._scratches: list[Path] = []  # with a pool: the scratch directories of the workers this evaluator used
        self._baseline: dict[str, Any] | None = None
        self.distributions = ["problem", "shifted", "signed"]  # rotated over trials (tools/judge/trials.py)
        self.dropped: dict[str, str] = {}  # a distribution this problem does not allow: why
        # evaluate() may run in several threads at once (RL rewards): this guards what they share,
        # the reference worker (and its output cache) and the pool of spare candidate workers
        self._lock = threading.RLock()
        try:
            self.reference = Reference(self.problem, self._reference_worker, self._start, self.options.build_timeout)
            for _ in range(self.options.spares):  # they start while the reference loads
                self._spares.append(self._candidate_worker())
            self.reference.build()
            # the second clock's copy charge (tools/timing/clocks.py), measured before any candidate runs
            timed = self.options.timing and self.device.startswith("cuda")
            self.copy_ms_per_byte = self.spawner.copy_ms_per_byte() if timed else None
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
        self._end_reaping()
        spares, self._spares = list(self._spares), collections.deque()
        if self.pool is not None:  # never handed a candidate: the next problem's evaluator may take them
            kept = self.pool.give_back(spares)
            spares = [proc for proc in spares if proc not in kept]
            self._scratches = [path for path in self._scratches if all(path != Spawner.scratch_of(p) for p in kept)]
        for proc in (getattr(self, "reference", None), *spares, *self._prebuilds.values()):
            if proc is not None:
                proc.close()
        self._prebuilds.clear()
        if self.pool is None:
            self.spawner.close()
        else:
            for path in self._scratches:
                shutil.rmtree(path, ignore_errors=True)
            self._scratches.clear()

    def _end_reaping(self) -> None:
        """No candidate's process outlives its evaluator. A used worker is killed by a thread of its
        own (builds.reap) after it hands over what it compiled, which on a GPU it answers at its own
        pace, for up to builds.ARTIFACT_REQUEST_S, its kernels running on; left to run past close,
        it would overlap the next problem's opening on the same device (a warm pool's slot opens it
        at once), where the eager and torch.compile baselines are measured once, the latter kept on
        disk. A reap still going after REAP_GRACE_S is cut short: its worker is killed."""
        with self._lock:
            reaping, self._reaping = self._reaping, []
        deadline = time.monotonic() + REAP_GRACE_S
        for _, thread in reaping:
            thread.join(max(0.0, deadline - time.monotonic()))
        for worker, thread in reaping:
            if thread.is_alive():
                worker.stop()  # its thread sees it die, and closes it
                thread.join(60)

    def baseline(self) -> dict[str, Any]:
        """Eager and torch.compile times and the roofline floor of the problem, before any
        candidate (on a GPU; bytes and flops only elsewhere). Measured once per evaluator."""
        with self._lock:
            if self._baseline is None:
                self._baseline = profile.baselines(self)
            return dict(self._baseline)

    def prebuild(self, source: str) -> bool:
        """Start building a CUDA C++ candidate's load_inline extensions now, in a build sandbox
        without a GPU, while the GPU evaluates something else; evaluate(source) later waits for
        it. True if a build was started."""
        return builds.start(self, source)

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

    # evaluation ---------------------------------------------------------------------------
    def evaluate(self, source: str) -> Result:
        """Evaluate one candidate source. Never raises: whatever the candidate does has a verdict,
        and a fault of the evaluator's own (a reference worker that cannot be kept alive, a bug)
        is a result with verdict `error`, never charged to the candidate. A reference worker that
        died is restarted first; one that dies during the evaluation is restarted and the
        candidate evaluated once more, in a fresh worker; a second loss is an `error`."""
        try:
            with self._lock:
                restarted = self.reference.ensure_alive()
            try:
                result = self._evaluate_once(source)
            except ReferenceLost as exc:
                with self._lock:
                    self.reference.ensure_alive()
                result = self._evaluate_once(source)
                passed(result, "reference", f"{exc}; restarted, and the candidate evaluated again")
                return result
            if restarted:
                passed(result, "reference", "the reference worker had died; restarted before this evaluation")
            return result
        except Exception as exc:  # noqa: BLE001 - a fault of ours becomes a result, recorded with its traceback
            return self._fault(source, exc)

    def _fault(self, source: str, exc: Exception) -> Result:
        """An evaluator fault as a result: verdict `error`, with what happened."""
        result = self._new_result(source)
        detail = describe_exception(exc)
        where = "".join(traceback.format_exception(exc)[-4:])[-2000:]
        fail(result, Verdict.ERROR, "evaluator", f"{detail}\n{where}",
             f"ratchet's evaluator failed ({detail}); this says nothing about the candidate: evaluate it again")
        return result

    def _new_result(self, source: str) -> Result:
        env = {**environment(self.device), "sandbox": self.sandbox.isolation()}
        return Result(verdict=Verdict.OK, message="", problem=str(self.problem.path), problem_hash=self.problem.hash,
                      source_hash=hashlib.sha256(source.encode()).hexdigest(), environment=env,
                      precision=self.options.precision)

    def _evaluate_once(self, source: str) -> Result:
        started = time.monotonic()
        result = self._new_result(source)
        worker: WorkerProcess | None = None
        try:
            scan = static_checks(source, result, self.options.disabled_rules, self.problem.single_op_family)
            if scan is None:
                return result
            files = builds.artifacts_for(self, source, scan, result)
            if files is None:
                return result
            worker = self._take_worker()
            self._run(worker, source, files, result, scan.triton_kernels + scan.cuda_kernels,
                      defines_kernel=bool(scan.triton_kernels or scan.uses_load_inline))
        finally:
            if worker is not None:
                worker.unmap()  # the used worker is disposable: keep what it compiled, then kill and reap it
                keep = result.ok or result.verdict in (Verdict.INCORRECT, Verdict.REJECTED)
                reaper = threading.Thread(target=builds.reap, args=(self, worker, result.source_hash, keep),
                                          name="ratchet-reap", daemon=True)
                with self._lock:  # close() ends what is still running
                    self._reaping = [(w, t) for w, t in self._reaping if t.is_alive()] + [(worker, reaper)]
                reaper.start()
            result.phases["total"] = round(time.monotonic() - started, 4)
        return result

    def _take_worker(self) -> WorkerProcess:
        with self._lock:
            worker = self._spares.popleft() if self._spares else self._candidate_worker()
            if self.options.warm and self.options.spares > 0:
                self._spares.append(self._candidate_worker())
            worker.max_reply_bytes = self.reply_cap()
            return worker

    def reply_cap(self) -> int:
        """The largest reply a candidate's worker may send: its outputs and inputs of one trial
        (on the CPU they travel as bytes; a held-out variant's trial included), or what a build
        hands over. Known once the reference has described the problem."""
        trials = [self.arena_cap(2, dist=f"variant:{k}") for k in range(len(self.problem.variants))]
        return max(self.arena_cap(2), *trials, self.artifacts.namespace_cap_bytes + (1 << 20))

    def _run(self, worker: WorkerProcess, source: str, files: tuple[list[dict[str, Any]], bytes], result: Result,
             kernel_names: list[str], defines_kernel: bool = True) -> None:
        t0 = time.monotonic()
        try:
            ready = worker.wait_ready(self.options.start_timeout)
            if ready.get("op") != "ready":
                raise WorkerGone("crashed", f"the candidate worker did not start: {ready.get('message')}")
            result.environment["sandbox"]["applied"] = ready.get("confined", [])
            result.phases["start"] = round(time.monotonic() - t0, 4)  # what this evaluation waited for it
            result.phases.update(worker.boot_phases(ready))
            builds.publish_tools_layer(self, worker)
            t0 = time.monotonic()
            if files[0]:
                installed = worker.request({"op": "install", "files": files[0]}, self.options.build_timeout, files[1])[0]
                if not self.verdict_from_reply(installed, "build", result):
                    return
            init_tree, init_payload = self.reference.init
            built = worker.request({"op": "build", "source": source, "init": init_tree}, self.options.build_timeout,
                                   init_payload)[0]
            result.phases["build"] = round(time.monotonic() - t0, 4)
            cuda = built.get("cuda") or {}
            if cuda.get("cached"):
                result.phases["cuda_load"] = round(cuda["seconds"], 4)  # inside "build"; built earlier (tools/processes/builds.py)
            if not self.verdict_from_reply(built, "build", result):
                return
            passed(result, "build")
            t0 = time.monotonic()
            trials.run(self, worker, result, source, defines_kernel)
            result.phases["correctness"] = round(time.monotonic() - t0, 4)
            if result.ok:
                self._profile(worker, result, kernel_names)
        except WorkerGone as exc:
            fail(result, Verdict(exc.verdict), "worker", str(exc))

    def _profile(self, worker: WorkerProcess, result: Result, kernel_names: list[str]) -> None:
        if not self.options.timing:
            profile.unavailable(result, "not measured (timing switched off)")
            return
        if not self.device.startswith("cuda"):
            profile.unavailable(result, "unavailable: no GPU (CPU runs use Triton's interpreter; times would mean nothing)")
            return
        t0 = time.monotonic()
        if self.problem.single_op is None:
            profile.own_kernel_share(self, worker, kernel_names, result)
        if result.ok:
            with self._lock:  # timing drives the shared reference worker (the eager arm)
                profile.measure(self, worker, result)
        result.phases["timing"] = round(time.monotonic() - t0, 4)

    def verdict_from_reply(self, reply: dict[str, Any], step: str, result: Result) -> bool:
        violations = reply.get("violations") or []
        if violations:
            for i, v in enumerate(violations):
                fail(result, Verdict.REJECTED, f"sandbox:{v.split(':')[0]}", v,
                     f"Rejected at run time during {step}: {violations[0]}" if i == 0 else None)
            return False
        if reply.get("op") == "error":
            # a worker reports how it failed, never a verdict of success or a fault of ours
            verdict = WORKER_FAILURES.get(reply.get("kind"), Verdict.RUNTIME_ERROR)
            return fail(result, verdict, step, reply.get("message", ""))
        return True

    def reference_outputs(self, seed: int, dist: str, borrow: bool = False) -> Any:
        """[outputs, inputs after forward] of the reference (tools/processes/reference.py); with `borrow`,
        a set too large to keep is views into the reference worker's arena: the caller holds
        `_lock` while it uses them (`trial_lock()` is that lock exactly when they are borrowed)."""
        with self._lock:
            return self.reference.outputs_for(seed, dist, timeout=self.options.trial_timeout,
                                              arena_cap=self.arena_cap(2, dist=dist), size=self.set_bytes(dist),
                                              keep_bytes=self.options.reference_cache_mb << 20, borrow=borrow)

    def set_bytes(self, dist: str) -> int:
        """Bytes of the reference's [outputs, inputs] on `dist` (a held-out variant's own)."""
        inputs, outputs = self.problem.input_bytes, self.problem.output_bytes
        if dist.startswith("variant:"):
            variant = self.problem.variants[int(dist.split(":")[1])]
            inputs, outputs = int(variant.get("input_bytes") or inputs), int(variant.get("output_bytes") or outputs)
        return inputs + outputs

    def trial_lock(self, dist: str) -> Any:
        """What a trial on `dist` holds from writing its inputs to comparing its outputs: the
        lock, when the reference's outputs are too large to keep and are read in place (borrowed)
        rather than copied beside the candidate's; nothing otherwise."""
        too_large = self.set_bytes(dist) > (self.options.reference_cache_mb << 20)  # as Reference.outputs_for
        return self._lock if too_large else contextlib.nullcontext()

    def arena_cap(self, copies: int, outputs_only: bool = False, inputs_only: bool = False,
                  dist: str = "problem") -> int:
        """Bytes a worker's arena may grow to for a reply holding `copies` times the
        reference's outputs (and inputs): room for honest answers, not for runaway ones. On a
        held-out variant's distribution ("variant:K"), the variant's when it took more (a
        larger variant: tools/worker/variant_bytes.py bounds it)."""
        inputs, outputs = self.problem.input_bytes, self.problem.output_bytes
        if dist.startswith("variant:"):
            variant = self.problem.variants[int(dist.split(":")[1])]
            inputs = max(inputs, int(variant.get("input_bytes") or 0))
            outputs = max(outputs, int(variant.get("output_bytes") or 0))
        size = (0 if inputs_only else outputs) + (0 if outputs_only else inputs)
        return copies * size + (64 << 20)


def evaluate(problem_path: Path | str, source: str, options: EvalOptions | None = None, entry: str = "Model") -> Result:
    """One-shot evaluation; raises ProblemError only for an invalid problem file."""
    with Evaluator(problem_path, options, entry) as ev:
        return ev.evaluate(source)
