"""Where the evaluator's worker processes come from: one device, one set of options, one scratch root.

A `Spawner` starts the reference worker (plain: the problem's Model is the user's own, trusted
code) and candidate workers (confined by tools/sandbox/), each with a scratch directory of its
own under the spawner's root. Nothing it starts knows the problem yet: a reference worker is told
which file to load by its first request (tools/processes/reference.py), and a candidate worker is handed
its source later. So one spawner serves problem after problem: an Evaluator owns one, or borrows
the one of a warm pool (tools/processes/warm.py) that starts workers before the problem using them is known.
"""
from __future__ import annotations

import hashlib
import os
import shutil
import tempfile
import threading
from pathlib import Path
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from tools.processes import builds

from tools.processes import bytecode
from tools.processes.artifacts import ArtifactCache
from tools.env import environment
from tools.processes.process import Limits, WorkerProcess
from tools.processes.zygote import ZygoteFailed, fork_enabled, zygote_for
from tools.sandbox import Fork, Launch, Sandbox, Wrapper
from tools.sandbox.bwrap import python_command
from tools.sandbox.env import ALLOCATOR_CONF, candidate_env, secret

if TYPE_CHECKING:
    from tools.options import EvalOptions

COPY_PROBE_BYTES = 128 << 20
INIT_SEED = 42  # both models are built after torch.manual_seed(INIT_SEED), so weights match
PROBE_SEED = 1234  # inputs of the one descriptive reference run (shapes, ops); not a trial seed
# the options a started worker depends on: two evaluators may share workers only where these agree
SPAWN_FIELDS = ("device", "precision", "sandbox", "scratch_mb", "max_processes", "host_memory_mb", "float64_host_mb",
                "file_mb", "gpu_memory_fraction", "cache_dir", "artifact_cache_mb", "bytecode_cache")


def spawn_key(options: "EvalOptions") -> tuple[Any, ...]:
    """What workers started for `options` depend on (options as tools.options.resolved() made them)."""
    return tuple(getattr(options, name) for name in SPAWN_FIELDS)


def environment_fingerprint() -> str:
    """A digest of the environment a new worker is made from (secrets never reach a worker)."""
    items = sorted((k, v) for k, v in os.environ.items() if not secret(k))
    return hashlib.sha256(repr(items).encode()).hexdigest()


class Spawner:
    """Starts workers for one device and one set of options (see the module docstring). Raises
    SandboxUnavailable when the sandbox the options require cannot be had."""

    def __init__(self, options: "EvalOptions") -> None:
        """`options` as tools.options.resolved() made them: a device "cpu" or "cuda:N", a cache directory."""
        if options.device is None or options.cache_dir is None:
            raise ValueError("a Spawner takes resolved options (tools.options.resolved)")
        self.options = options
        self.key = spawn_key(options)
        self.device = options.device
        self.device_index = int(self.device.split(":")[1]) if self.device.startswith("cuda:") else 0
        self.sandbox = Sandbox(options.sandbox, tmp_mb=options.scratch_mb, max_processes=options.max_processes)
        self.cache_dir = options.cache_dir
        for sub in ("triton/reference", "baselines"):
            (self.cache_dir / sub).mkdir(parents=True, exist_ok=True)
        self.artifacts = ArtifactCache(self.cache_dir / "artifacts", options.artifact_cache_mb << 20)
        self.toolchain = builds.toolchain(self.device)
        self.bytecode = bytecode.prefix_for(self.cache_dir, options.bytecode_cache,
                                            protected=self.sandbox.read_only_for_candidates)
        self.root = Path(tempfile.mkdtemp(prefix="ratchet-eval-")).resolve()
        self.root.chmod(0o755)  # a best-effort worker running as its own uid reaches its scratch
        # workers are forks of a zygote (tools/processes/zygote.py), not exec'd, where no candidate can reach one
        self.fork = fork_enabled() and self.sandbox.forks_workers
        if self.fork:  # the candidates' zygote starts now, importing while the evaluator opens
            self._prestart()
        self.spawned = 0  # workers started so far (their scratch directories are numbered by it)
        self._count_lock = threading.Lock()
        self._copy_lock = threading.Lock()
        self._copy_ms_per_byte: float | None = None

    def spawn(self, role: str, profile_name: str = "run", wrapper: Wrapper | None = None) -> WorkerProcess:
        """A new worker of `role` ("reference" or "candidate"); a candidate with the "run" profile
        (it gets the GPU) or "build" (a CUDA C++ build: no GPU). It starts now; wait_ready() waits.
        `wrapper`: a candidate's worker run under a trusted program in its sandbox (exec'd, never
        forked; tools/sandbox/__init__.py, Sandbox.launch)."""
        # first: the environment made below is this one or a later one, never an earlier one (another
        # thread may change os.environ meanwhile), so a changed environment never passes for this one
        fingerprint = environment_fingerprint()
        name = role if profile_name == "run" else profile_name
        with self._count_lock:
            self.spawned += 1
            scratch = self.root / f"{name}-{self.spawned}"
        (scratch / "tmp").mkdir(parents=True)
        mb = self.options.host_memory_mb
        if mb and role == "reference":  # room for its float64 evaluations in host memory (tools/judge/exact_host.py)
            mb += self.options.float64_host_mb or 0
        limits = Limits(host_memory_bytes=mb << 20 if mb else None,
                        file_bytes=self.options.file_mb << 20 if self.options.file_mb else None)
        device = "cpu" if profile_name == "build" else self.device
        extra = self._extra_env(role, profile_name, scratch)
        config: dict[str, Any] = {"role": role, "device": device, "scratch": str(scratch), "init_seed": INIT_SEED,
                                  "gpu_memory_fraction": self.options.gpu_memory_fraction,
                                  "precision": self.options.precision}
        files: tuple[list[dict[str, Any]], bytes] | None = None
        if role == "reference":
            config.update(probe_seed=PROBE_SEED)
            # exec'd, not forked: under the full test suite's load a forked reference worker now and
            # then ended with status 125 and an empty log before it served (3 of 5 runs on a 2-core
            # machine, never alone; not yet understood). A candidate's worker never did.
            launch = plain_launch(worker_env(device, extra), fork=False)
        else:
            triton = extra["TRITON_CACHE_DIR"]
            config.update(profile=profile_name, writable=[str(scratch), triton], triton_cache=triton,
                          hidden=[str(self.cache_dir)],  # not even mounted under bwrap; refused in Python without it
                          executables=[str(p) for p in builds.executables(profile_name)])
            files = builds.tools_layer(self.device, self.artifacts, self.toolchain) if profile_name == "run" else None
            readable = ([self.bytecode] if self.bytecode else []) + (wrapper.readable if wrapper else [])
            launch = lambda fds: self.sandbox.launch(fds, scratch=scratch, profile=profile_name, device=device,  # noqa: E731
                                                     gpu=device.startswith("cuda"), extra_env=extra, readable=readable,
                                                     fork=self.fork and wrapper is None,
                                                     wrapper=wrapper)
        if files:
            config["files"] = files[0]
        proc = WorkerProcess(config, launch=launch, cwd=self.root, log=scratch / "output.log", limits=limits,
                             cuda=device.startswith("cuda"), device_index=self.device_index,
                             payload=files[1] if files else b"", untrusted=role != "reference")
        proc.environment = fingerprint
        return proc

    def _extra_env(self, role: str, profile_name: str, scratch: Path) -> dict[str, str]:
        """What a worker's environment adds to the reference's (the parent's) or a candidate's
        (tools/sandbox/env.py)."""
        extra = {"TMPDIR": str(scratch / "tmp")}
        if self.device.startswith("cuda"):  # the same arch flags with and without a GPU: one build
            extra["TORCH_CUDA_ARCH_LIST"] = str(environment(self.device).get("capability") or "")
        if role == "reference":
            extra.update(TRITON_HOME=str(scratch), TRITON_CACHE_DIR=str(self.cache_dir / "triton" / "reference"),
                         **bytecode.worker_env(self.bytecode, writer=True))
            return extra
        # one path in every sandbox (its private /tmp): Triton's cache records absolute paths
        triton = Path("/tmp/ratchet-triton") if self.sandbox.mechanisms.bwrap else scratch / "triton"
        extra["TRITON_CACHE_DIR"] = str(triton)
        # autotuning's results on disk with the kernels (the source's own artifact namespace): a
        # later worker of the same source does not benchmark every config again (0.6 s for a
        # 4-config GEMM on an H100, every evaluation)
        extra["TRITON_CACHE_AUTOTUNING"] = "1"
        extra.update(bytecode.worker_env(self.bytecode, writer=False))
        if profile_name == "build":
            extra["CUDA_VISIBLE_DEVICES"] = ""
        return extra

    def _prestart(self) -> None:
        """Start the zygote that the run profile's candidate workers will be forked
        from, before the first is asked for (it does not wait for its imports). A failure here is
        not lost: the spawn that needs the zygote starts it again and raises it."""
        scratch = self.root / "prestart"  # never made: what differs per worker is not the zygote's
        extra = self._extra_env("candidate", "run", scratch)
        env = candidate_env(self.device, scratch, "run", extra)
        try:
            zygote_for(env, reserve=False)
        except (ZygoteFailed, OSError):
            pass

    def copy_ms_per_byte(self) -> float:
        """The device-to-device bandwidth of the parent's own buffers (the second clock's copy
        charge, tools/timing/clocks.py), measured once, the first time it is asked: before any candidate
        of this spawner has run."""
        with self._copy_lock:
            if self._copy_ms_per_byte is None:
                self._copy_ms_per_byte = measure_copy(self.device)
            return self._copy_ms_per_byte

    @staticmethod
    def scratch_of(proc: WorkerProcess) -> Path:
        return proc.log.parent

    def close(self) -> None:
        shutil.rmtree(self.root, ignore_errors=True)


def measure_copy(device: str) -> float:
    """Milliseconds per byte of a device-to-device copy between the parent's own buffers."""
    import torch

    src = torch.empty(COPY_PROBE_BYTES, dtype=torch.uint8, device=device)
    dst = torch.empty_like(src)
    dst.copy_(src)
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    best = float("inf")
    for _ in range(3):
        start.record()
        dst.copy_(src)
        end.record()
        end.synchronize()
        best = min(best, start.elapsed_time(end))
    return best / COPY_PROBE_BYTES


PROJECT_ROOT = Path(__file__).resolve().parents[2]


def plain_launch(env: dict[str, str], *, fork: bool = False) -> Callable[[tuple[int, ...]], Launch]:
    """An unconfined worker (the reference: the user's own problem code, trusted); `fork`: a fork
    of a zygote rather than an exec."""
    return lambda fds: Launch(argv=python_command(fds), env=env, fork=Fork() if fork else None)


def worker_env(device: str, extra: dict[str, str]) -> dict[str, str]:
    """The reference worker's environment: the parent's, less anything that looks like a secret."""
    env = {k: v for k, v in os.environ.items() if not secret(k)}
    env["PYTHONPATH"] = os.pathsep.join([str(PROJECT_ROOT), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    env["CUBLAS_WORKSPACE_CONFIG"] = ":4096:8"
    env.setdefault("PYTORCH_CUDA_ALLOC_CONF", ALLOCATOR_CONF)  # as the candidate's (tools/sandbox/env.py)
    env["PYTHONWARNINGS"] = "ignore"
    if device == "cpu":
        env["TRITON_INTERPRET"] = "1"
    env.update(extra)
    return env
