"""How a candidate's worker process is confined by the operating system (trusted, parent side).

Threat model: the candidate owns its whole process, native code included. So confinement comes
from the kernel, set up before any candidate code exists, and holds whatever the process does:

- bubblewrap (tools/sandbox/bwrap.py): namespaces, a minimal read-only file system view,
  size-capped tmpfs scratch, no capabilities, a process tree that dies whole;
- seccomp (tools/sandbox/seccomp.py, libseccomp): no ptrace or other process's memory, no
  mounts or namespaces, no kernel modules or BPF, internet sockets refused;
- landlock (tools/worker/confine.py, applied by the worker before it imports torch): executes
  only the profile's toolchain, writes only below its scratch;
- resource limits (processes and threads, open files, file size, core dumps; host memory);
- when the evaluator runs as root, an unprivileged uid of its own per worker.

`Sandbox("required")` (the default) refuses to start without all of them, naming what is
missing (SandboxUnavailable); `Sandbox("best-effort")` uses what the machine has and says what it
lacks in every result's environment. See docs/sandbox.md.
"""
from __future__ import annotations

import itertools
import json
import os
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tools.options import SANDBOX_MODES
from tools.sandbox import bwrap as bw
from tools.sandbox import paths
from tools.sandbox.env import candidate_env
from tools.sandbox.probe import Mechanisms, probe

MODES = SANDBOX_MODES  # the option's values (tools/options.py)
UID_BASE = 2_000_000_000  # workers of a root evaluator run as uids far above any real user's
_uids = itertools.count()


class SandboxUnavailable(Exception):
    """The required confinement is not available here; str() is one line naming what is missing."""


@dataclass
class Fork:
    """How a worker forked from a zygote (tools/processes/zygote.py) is confined: what bwrap and
    setpriv did for an exec'd worker, which the fork applies to itself (tools/zygote/enter.py)."""

    holder: list[str] | None = None  # bwrap's command line holding the worker's own sandbox (its command waits)
    uid: int | None = None  # the unprivileged uid it drops to (the evaluator is root)
    seccomp: bytes | None = None  # the system-call filter it loads
    cwd: str | None = None  # its working directory (inside the sandbox), else the spawner's
    confined: bool = False  # a candidate's worker (the reference's is plain)


@dataclass(frozen=True)
class Wrapper:
    """A trusted program a candidate's worker runs under, inside the worker's sandbox (Nsight
    Compute, tools/counters/): the program's command line up to the worker's, and the directories
    it needs to read (its installation)."""

    argv: list[str]
    readable: list[Path]
    executable: list[Path]  # what it may execute besides the worker's own (its installation, a shell)


@dataclass
class Launch:
    """How to start one worker: by exec (argv), or as a fork of a zygote (`fork`)."""

    argv: list[str]
    env: dict[str, str]
    pass_fds: tuple[int, ...] = ()
    close_after: list[int] = field(default_factory=list)  # fds the parent closes once started
    user: int | None = None  # Popen(user=, group=): dropping the uid without bwrap
    confine: dict[str, Any] = field(default_factory=dict)  # what the worker applies to itself
    fork: Fork | None = None


class Sandbox:
    def __init__(self, mode: str = "required", *, tmp_mb: int = 2048, max_processes: int = 1024,
                 max_open_files: int = 4096) -> None:
        if mode not in MODES:
            raise ValueError(f"--sandbox {mode}: expected one of {', '.join(MODES)}")
        self.mode = mode
        self.tmp_bytes = tmp_mb << 20
        self.rlimits = {"nproc": max_processes, "nofile": max_open_files}
        self.mechanisms: Mechanisms = probe()
        if mode == "required" and self.mechanisms.missing:
            raise SandboxUnavailable(
                f"the OS sandbox is required but {'; '.join(self.mechanisms.missing)}; "
                "use --sandbox best-effort (EvalOptions(sandbox='best-effort')) to run with weaker isolation")

    @property
    def read_only_for_candidates(self) -> bool:
        """Whether a directory of ours that a candidate's worker may read is one it cannot change:
        bwrap binds it read-only; without bwrap, landlock refuses writes but not chmod or chown,
        which only a uid of the worker's own (not the files' owner) stops."""
        m = self.mechanisms
        return bool(m.bwrap) or bool(m.landlock_abi and m.root and m.drop_uid)

    @property
    def isolates_workers(self) -> bool:
        """Whether no candidate's worker can reach another process of the evaluator's (its zygotes
        among them: tools/processes/zygote.py): bwrap's pid namespace hides them, or the worker
        runs as a uid of its own. Otherwise (best-effort as the evaluator's own uid) a candidate
        could tamper with a zygote that later workers, the reference's too, are forked from, so
        every worker is started by exec instead."""
        m = self.mechanisms
        return bool(m.bwrap) or bool(m.root and m.drop_uid)

    @property
    def forks_workers(self) -> bool:
        """Whether workers may be forked from a zygote here: they are isolated from it (above), and
        the evaluator is root. Run by another user, bwrap's mount namespace belongs to a user
        namespace the fork cannot act in (`setns(mnt)` refused, seen 2026-11-28 as uid 65534):
        such an evaluator execs its workers, as before the zygote."""
        return self.isolates_workers and self.mechanisms.root

    def isolation(self) -> dict[str, Any]:
        """For the result's environment: the mode, what confined the worker, what was missing."""
        m = self.mechanisms
        used = ["rlimits", "python-audit-hook"]
        if m.bwrap:
            used = ["namespaces:user" if not m.root else "namespaces", "bwrap-filesystem", *used]
        if m.seccomp and m.bwrap:
            used.append("seccomp")
        if m.landlock_abi:
            used.append(f"landlock-abi{m.landlock_abi}")
        if m.root and m.drop_uid:
            used.append("unprivileged-uid")
        return {"mode": self.mode, "mechanisms": used, "missing": list(m.missing)}

    def launch(self, fds: tuple[int, ...], *, scratch: Path, profile: str, device: str, gpu: bool,
               extra_env: dict[str, str], readable: list[Path] | None = None, fork: bool = False,
               wrapper: Wrapper | None = None) -> Launch:
        """The command, environment and self-confinement of one worker of `profile`; `readable`:
        more directories it may read (bound read-only under bwrap); `fork`: the worker will be a
        fork of a zygote, confining itself as Launch.fork says (else bwrap starts it by exec);
        `wrapper`: a trusted program the worker runs under, inside the same sandbox (Nsight Compute,
        tools/counters/): its own directories must be in `readable`. Only under bwrap, by exec: the
        wrapper then has the worker's namespaces, seccomp filter and uid, and applies the worker's
        limits and landlock rules to itself before it starts (tools/worker/wrap.py), with its own
        installation executable too."""
        m = self.mechanisms
        command = bw.python_command(fds)
        if wrapper is not None and (fork or not m.bwrap):
            raise SandboxUnavailable("a worker runs under a wrapper only inside bubblewrap, by exec")
        env = candidate_env(device, scratch, profile, extra_env)
        uid = UID_BASE + (os.getpid() % 20_000) * 100 + next(_uids) % 100 if m.root and m.drop_uid else None
        writable = [str(scratch), "/dev/shm"] + (["/tmp"] if m.bwrap else [])
        confine: dict[str, Any] = {"rlimits": dict(self.rlimits)}
        if m.landlock_abi:
            devices = ["/dev/null", "/dev/zero", "/dev/full"] + (bw.gpu_devices() if gpu else [])
            confine["landlock"] = {"writable": writable, "devices": devices,
                                   "executable": [str(p) for p in paths.executables(profile)]}
        if wrapper is not None:  # confined as the worker is, by tools/worker/wrap.py, before it execs the wrapper
            wrapped = dict(confine)
            if "landlock" in wrapped:
                rules = dict(wrapped["landlock"])
                # its own programs, and the interpreter it starts the worker with
                rules["executable"] = rules["executable"] + [str(p) for p in wrapper.executable] + [
                    str(Path(sys.executable).resolve())]
                # /proc (bwrap's own: the sandbox's processes only), not just the wrapper's entry: its rules
                # are the worker's until the worker adds its own, and CUDA starting in the worker (under
                # ncu's injection, before that) writes its own entry (Error 304 on an H100 without this)
                rules["writable"] = rules["writable"] + ["/proc"]
                wrapped["landlock"] = rules
            command = [sys.executable, "-m", "tools.worker.wrap", json.dumps(wrapped), *wrapper.argv, *command]
        if not m.bwrap:  # best effort: the worker runs on the host file system, as its own uid if we are root
            if uid is not None:
                _hand_over(scratch, uid)
            return Launch(argv=command, env=env, user=uid, confine=confine,
                          fork=Fork(uid=uid, confined=True) if fork else None)
        if fork:  # the holder needs no filter and no setpriv: the worker applies both to itself
            from tools.sandbox.seccomp import filter_bpf

            holder = bw.Spec(scratch=scratch, gpu=gpu, tmp_bytes=self.tmp_bytes, uid=uid, seccomp_fd=None,
                             extra_readable=list(readable or []))
            return Launch(argv=command, env=env, confine=confine, fork=Fork(
                holder=bw.argv(m.bwrap, holder, bw.HOLDER_COMMAND, holder=True), uid=uid,
                seccomp=filter_bpf() if m.seccomp else None, cwd=str(scratch), confined=True))
        seccomp_fd = _bpf_fd() if m.seccomp else None
        spec = bw.Spec(scratch=scratch, gpu=gpu, tmp_bytes=self.tmp_bytes, uid=uid, seccomp_fd=seccomp_fd,
                       extra_readable=list(readable or []))
        extra = [] if seccomp_fd is None else [seccomp_fd]
        return Launch(argv=bw.argv(m.bwrap, spec, command), env=env, pass_fds=tuple(extra), close_after=extra,
                      confine=confine)


def _bpf_fd() -> int:
    """A fresh file holding the seccomp program, at offset 0 (bwrap reads it to the end)."""
    from tools.sandbox.seccomp import filter_bpf

    fd = os.memfd_create("ratchet-seccomp", 0)
    os.write(fd, filter_bpf())
    os.lseek(fd, 0, os.SEEK_SET)
    return fd


def _hand_over(scratch: Path, uid: int) -> None:
    for p in [scratch, *scratch.rglob("*")]:
        os.chown(p, uid, uid)
