"""The evaluator's one entry point: `Evaluator(problem).evaluate(source) -> Result`.

This is where a verdict is decided. The trusted parent (this process) never imports candidate
code. It keeps one reference worker per problem (the problem's Model, its outputs per secret
seed), and gives each candidate a fresh worker process, spawned ahead of need so CUDA start-up
and problem loading are off the critical path. Steps: static checks and guard, build, trials
(seeded inputs made on the device after the build, two distributions, poisoned memory), then
the run-time integrity checks (own kernel launched, nothing forbidden left to torch, no
sandbox violation). The first failure decides the verdict and the message for the model.
"""
from __future__ import annotations

import collections
import hashlib
import random
import secrets
import shutil
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tools import guard as guard_mod
from tools import profile
from tools.baseline_cache import default_cache_dir
from tools.compare import Stats, Tolerance
from tools.env import environment, resolve_device
from tools.ops import compute_ops
from tools.problem import ProblemError, ProblemInfo, candidate_problems, read_problem
from tools.process import Limits, WorkerGone, WorkerProcess, worker_env
from tools.reference import Reference, ReferenceLost
from tools.record import Check, Errors, Result, Verdict
from tools.transport import TransportError
from tools.trial_checks import aliasing, fail, mismatch, nonfinite

INIT_SEED = 42  # both models are built after torch.manual_seed(INIT_SEED), so weights match
PROBE_SEED = 1234  # inputs of the one descriptive reference run (shapes, ops); not a trial seed


@dataclass
class EvalOptions:
    device: str | None = None  # None: cuda:0 when there is a GPU, else cpu (Triton interpreter)
    trials: int = 5
    timing: bool = True
    disabled_rules: frozenset[str] = frozenset()  # guard rules switched off (see README)
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
    extra: dict[str, Any] = field(default_factory=dict)


class Evaluator:
    def __init__(self, problem_path: Path | str, options: EvalOptions | None = None, entry: str = "Model") -> None:
        self.options = options or EvalOptions()
        self.device = resolve_device(self.options.device)
        self.problem: ProblemInfo = read_problem(Path(problem_path), entry)
        run_seed = self.options.seed if self.options.seed is not None else secrets.randbits(62)
        rng = random.Random(run_seed)
        self.seeds = [rng.getrandbits(62) for _ in range(max(1, self.options.trials))]
        self.cache_dir = (self.options.cache_dir or default_cache_dir()).resolve()
        for sub in ("cuda", "triton/shared", "baselines"):  # workers may write only inside these
            (self.cache_dir / sub).mkdir(parents=True, exist_ok=True)
        self.root = Path(tempfile.mkdtemp(prefix="ratchet-eval-")).resolve()
        self._spares: collections.deque[WorkerProcess] = collections.deque()
        self._prebuilds: dict[str, WorkerProcess] = {}
        self._baseline: dict[str, Any] | None = None
        self._count = 0
        self.distributions = ["problem", "shifted"]
        # evaluate() may run in several threads at once (RL rewards): this guards what they share,
        # the reference worker (and its output cache) and the pool of spare candidate workers
        self._lock = threading.RLock()
        try:
            self.reference = Reference(self.problem, lambda: self._spawn("reference"), self._start,
                                       self.options.build_timeout)
            for _ in range(self.options.spares):  # they start while the reference loads
                self._spares.append(self._spawn("candidate"))
            self.reference.build()
        except (WorkerGone, ReferenceLost) as exc:
            self.close()
            raise ProblemError(f"{self.problem.path.name}: {exc}") from None
        except ProblemError:
            self.close()
            raise

    # lifecycle --------------------------------------------------------------------------
    def __enter__(self) -> "Evaluator":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        for proc in (getattr(self, "reference", None), *self._spares, *self._prebuilds.values()):
            if proc is not None:
                proc.close()
        self._prebuilds.clear()
        self._spares.clear()
        shutil.rmtree(self.root, ignore_errors=True)

    def baseline(self) -> dict[str, Any]:
        """Eager and torch.compile times and the roofline floor of the problem, before any
        candidate (on a GPU; bytes and flops only elsewhere). Measured once per evaluator."""
        with self._lock:
            if self._baseline is None:
                self._baseline = profile.baselines(self)
            return dict(self._baseline)

    def prebuild(self, source: str) -> bool:
        """Start building a CUDA C++ candidate's load_inline extensions on CPU cores now, in a
        worker without a GPU, while the GPU evaluates something else; evaluate(source) later
        waits for it and finds the build cached. True if a build was started."""
        digest = hashlib.sha256(source.encode()).hexdigest()
        with self._lock:
            if not self.device.startswith("cuda") or digest in self._prebuilds or "load_inline" not in source:
                return False
            proc = self._spawn("candidate", build_only=True)
            proc.send({"op": "build", "source": source})
            self._prebuilds[digest] = proc
            return True

    def _finish_prebuild(self, digest: str, result: Result) -> None:
        with self._lock:
            proc = self._prebuilds.pop(digest, None)
        if proc is None:
            return
        try:
            proc.wait_ready(self.options.start_timeout)
            header, _ = proc.reply(self.options.build_timeout)
            cuda = header.get("cuda") or {}
            result.phases["prebuild"] = round(float(cuda.get("seconds", 0.0)), 4)
        except WorkerGone as exc:  # the GPU worker builds again and reports the real failure
            result.phases["prebuild"] = -1.0
            result.checks.append(Check("prebuild", True, f"prebuild did not finish: {exc}"))
        finally:
            proc.close()

    def _spawn(self, role: str, build_only: bool = False) -> WorkerProcess:
        self._count += 1
        scratch = self.root / f"{role}-{self._count}"
        (scratch / "tmp").mkdir(parents=True)
        config = {
            "role": role, "problem": str(self.problem.path), "entry": self.problem.entry,
            "device": self.device, "scratch": str(scratch), "init_seed": INIT_SEED,
            "probe_seed": PROBE_SEED, "gpu_memory_fraction": self.options.gpu_memory_fraction,
            "cuda_cache": str(self.cache_dir / "cuda"), "triton_cache": str(self.cache_dir / "triton"),
            "writable": [str(scratch), str(self.cache_dir / "cuda"), str(self.cache_dir / "triton")],
            "hidden": [str(self.root / "reference-1"), str(self.cache_dir / "private")],
            "build_only": build_only,
        }
        device = "cpu" if build_only else self.device
        mb = self.options.host_memory_mb
        limits = Limits(host_memory_bytes=mb << 20 if mb else None,
                        file_bytes=self.options.file_mb << 20 if self.options.file_mb else None)
        # triton reads its cache location when imported, before a candidate's source is known:
        # a shared, content-addressed cache that the build step narrows to the source's own dir
        extra = {"TMPDIR": str(scratch / "tmp"), "TRITON_HOME": str(scratch),
                 "TRITON_CACHE_DIR": str(self.cache_dir / "triton" / "shared")}
        if self.device.startswith("cuda"):  # the same arch flags with and without a GPU: one build
            extra["TORCH_CUDA_ARCH_LIST"] = str(environment(self.device).get("capability") or "")
        if build_only:
            extra["CUDA_VISIBLE_DEVICES"] = ""
            config["device"] = "cpu"
        env = worker_env(device, extra)
        return WorkerProcess(config, env=env, cwd=scratch, log=scratch / "output.log", limits=limits,
                             cuda=device.startswith("cuda"))

    def _start(self, proc: WorkerProcess) -> None:
        ready = proc.wait_ready(self.options.start_timeout)
        if ready.get("op") != "ready":
            raise ProblemError(f"{self.problem.path.name}: {ready.get('message', 'the worker did not start')}".splitlines()[0])

    # evaluation ---------------------------------------------------------------------------
    def evaluate(self, source: str) -> Result:
        """Evaluate one candidate source. Never raises for anything the candidate does. A
        reference worker that died is restarted first; one that dies during the evaluation is
        restarted and the candidate evaluated once more, in a fresh worker (a second loss raises
        ReferenceLost: something kills it, and the candidate may be the cause)."""
        with self._lock:
            restarted = self.reference.ensure_alive()
        try:
            result = self._evaluate_once(source)
        except ReferenceLost as exc:
            with self._lock:
                self.reference.ensure_alive()
            result = self._evaluate_once(source)
            result.checks.append(Check("reference", True, f"{exc}; restarted, and the candidate evaluated again"))
            return result
        if restarted:
            result.checks.append(Check("reference", True, "the reference worker had died; restarted before this evaluation"))
        return result

    def _evaluate_once(self, source: str) -> Result:
        started = time.monotonic()
        result = Result(verdict=Verdict.OK, message="", problem=str(self.problem.path),
                        problem_hash=self.problem.hash,
                        source_hash=hashlib.sha256(source.encode()).hexdigest(),
                        environment=environment(self.device))
        result.torch_ops = []
        worker: WorkerProcess | None = None
        try:
            scan = self._static_checks(source, result)
            if scan is not None:
                self._finish_prebuild(result.source_hash, result)
                worker = self._take_worker()
                self._run(worker, source, result, scan.triton_kernels + scan.cuda_kernels)
        finally:
            if worker is not None:
                worker.arena = None  # unmap now; the used worker is disposable: kill and reap it
                threading.Thread(target=worker.kill, name="ratchet-reap", daemon=True).start()
            result.phases["total"] = round(time.monotonic() - started, 4)
        return result

    def _static_checks(self, source: str, result: Result) -> guard_mod.Scan | None:
        t0 = time.monotonic()
        problem = candidate_problems(source)
        if problem:
            fail(result, Verdict.COMPILE_ERROR, Check("parse", False, problem), problem)
            return None
        result.checks.append(Check("parse", True))
        policy = guard_mod.GuardPolicy(disabled=self.options.disabled_rules, single_op=self.problem.single_op_family)
        scan = guard_mod.check(source, policy)
        result.phases["guard"] = round(time.monotonic() - t0, 4)
        if scan.violations:
            for v in scan.violations:
                result.checks.append(Check(f"guard:{v.rule}", False, str(v)))
            first = scan.violations[0]
            more = f" (and {len(scan.violations) - 1} more)" if len(scan.violations) > 1 else ""
            result.verdict, result.message = Verdict.REJECTED, f"Rejected by the guard, {first}{more}."
            return None
        result.checks.append(Check("guard", True, f"kernels: {', '.join(scan.triton_kernels + scan.cuda_kernels) or 'load_inline'}"))
        return scan

    def _take_worker(self) -> WorkerProcess:
        with self._lock:
            worker = self._spares.popleft() if self._spares else self._spawn("candidate")
            if self.options.warm and self.options.spares > 0:
                self._spares.append(self._spawn("candidate"))
            return worker

    def _run(self, worker: WorkerProcess, source: str, result: Result, kernel_names: list[str]) -> None:
        t0 = time.monotonic()
        try:
            ready = worker.wait_ready(self.options.start_timeout)
            if ready.get("op") != "ready":
                raise WorkerGone("crashed", f"the candidate worker did not start: {ready.get('message')}")
            result.environment = {**result.environment, "network_isolation": ready.get("network")}
            result.phases["start"] = round(time.monotonic() - t0, 4)
            t0 = time.monotonic()
            built = worker.request({"op": "build", "source": source}, self.options.build_timeout)[0]
            result.phases["build"] = round(time.monotonic() - t0, 4)
            cuda = built.get("cuda") or {}
            if cuda.get("built") or cuda.get("cached"):
                result.phases["cuda_build"] = round(cuda["seconds"], 4)  # inside "build"
            if not self.verdict_from_reply(built, "build", result):
                return
            result.checks.append(Check("build", True))
            t0 = time.monotonic()
            self._trials(worker, result)
            result.phases["correctness"] = round(time.monotonic() - t0, 4)
            if result.ok:
                self._profile(worker, result, kernel_names)
        except WorkerGone as exc:
            fail(result, Verdict(exc.verdict), Check("worker", False, str(exc)), str(exc))

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
            for v in violations:
                result.checks.append(Check(f"sandbox:{v.split(':')[0]}", False, v))
            return fail(result, Verdict.REJECTED, None, f"Rejected at run time during {step}: {violations[0]}")
        if reply.get("op") == "error":
            verdict = Verdict(reply["kind"]) if reply.get("kind") in Verdict._value2member_map_ else Verdict.RUNTIME_ERROR
            return fail(result, verdict, Check(step, False, reply.get("message", "")), reply.get("message", ""))
        return True

    def _trials(self, worker: WorkerProcess, result: Result) -> None:
        stats = Stats()
        launched: int | None = None  # the fewest own-kernel launches in any trial: each must launch
        torch_ops: set[str] = set()  # compute ops left to torch in any trial (every trial is recorded)
        for i, seed in enumerate(self.seeds):
            dist = self._distribution(i, seed)
            ref_out, ref_in = self.reference_outputs(seed, dist)
            header, payload = worker.request(
                {"op": "trial", "seed": seed, "distribution": dist, "poison": True, "record": True,
                 "arena_cap": self.arena_cap(2)}, self.options.trial_timeout)
            name = f"trial-{i}:{dist}"
            if i == 0:
                result.phases["first_trial"] = round(float(header.get("seconds") or 0.0), 4)  # incl. JIT
            if not self.verdict_from_reply(header, name, result):
                return
            count = int(header.get("launches") or 0)
            launched = count if launched is None else min(launched, count)
            result.kernel_launches = launched
            if isinstance(header.get("ops"), dict):
                torch_ops.update(compute_ops(header["ops"]))
                result.torch_ops = sorted(torch_ops)
            try:
                cand_out, cand_in = worker.outputs(header, payload)
            except (TransportError, KeyError, TypeError, ValueError) as exc:
                fail(result, Verdict.REJECTED, Check(name, False, f"malformed output: {exc}"), f"The worker sent malformed outputs ({exc}).")
                return
            problem = (aliasing(header["tree"]) or mismatch(ref_out, cand_out, stats, self.options.tolerances, "output")
                       or mismatch(ref_in, cand_in, Stats(), self.options.tolerances, "input", what="inputs after forward"))
            del cand_out, cand_in  # the worker frees its side at its next request
            result.errors = Errors(max_abs=stats.max_abs, max_rel=stats.max_rel, norm_rel=stats.norm_rel)
            if problem:
                check, verdict, message = problem
                fail(result, verdict, Check(f"{name}:{check}", False, message),
                     f"Trial {i + 1} of {len(self.seeds)} ({dist} inputs): {message}")
                return
            result.checks.append(Check(name, True))
            result.trials = i + 1
        self._integrity(result, launched or 0)

    def _integrity(self, result: Result, launched: int) -> None:
        if launched == 0:
            fail(result, Verdict.REJECTED, Check("kernel-launched", False, "a forward() with no launch of the candidate's own kernels"),
                 "Rejected: the candidate defines a kernel but did not launch it in every forward() call; the work must run in your own kernel.")
            return
        result.checks.append(Check("kernel-launched", True, f"{launched} launches in one forward"))
        if self.problem.single_op and result.torch_ops:
            ops = ", ".join(result.torch_ops)
            fail(result, Verdict.REJECTED, Check("single-op", False, ops),
                 f"Rejected (rule single-op): this problem is the single op {self.problem.single_op}, and forward() left {ops} to torch; compute it in your kernel.")
            return
        result.verdict = Verdict.OK
        result.message = f"Correct on {result.trials} trials (max abs error {result.errors.max_abs:.3g}, relative norm error {result.errors.norm_rel:.3g})."

    def _distribution(self, i: int, seed: int) -> str:
        with self._lock:
            dist = self.distributions[i % len(self.distributions)]
            if dist == "shifted":
                out, _ = self.reference_outputs(seed, "shifted")
                base, _ = self.reference_outputs(seed, "problem")
                if nonfinite(out) and not nonfinite(base):
                    self.distributions = ["problem"]  # the problem does not allow it
                    return "problem"
            return dist

    def reference_outputs(self, seed: int, dist: str) -> Any:
        with self._lock:
            return self._reference_outputs(seed, dist)

    def _reference_outputs(self, seed: int, dist: str) -> Any:
        return self.reference.outputs_for(seed, dist, timeout=self.options.trial_timeout,
                                          arena_cap=self.arena_cap(2),
                                          keep_bytes=self.options.reference_cache_mb << 20)

    def arena_cap(self, copies: int, outputs_only: bool = False) -> int:
        """Bytes a worker's arena may grow to for a reply holding `copies` times the
        reference's outputs (and inputs): room for honest answers, not for runaway ones."""
        size = self.problem.output_bytes + (0 if outputs_only else self.problem.input_bytes)
        return copies * size + (64 << 20)


def evaluate(problem_path: Path | str, source: str, options: EvalOptions | None = None, entry: str = "Model") -> Result:
    """One-shot evaluation; raises ProblemError only for an invalid problem file."""
    with Evaluator(problem_path, options, entry) as ev:
        return ev.evaluate(source)
