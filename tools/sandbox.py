"""Run-time confinement inside a worker process (the static guard's second line).

Before candidate code is imported the worker calls `Sandbox.arm()`. From then on an audit hook
(which Python offers no way to remove) refuses network access, new processes, ctypes,
garbage-collector introspection, signals to other processes, patching of torch's or triton's
classes, and writes outside the scratch directory; the worker also leaves the host's network
namespace where the OS allows it. Each refusal is recorded with its rule and raised in the
candidate as PermissionError, so the parent rejects the candidate even if it swallowed the error.
Tripwires compare torch's timing, sync and precision state before and after every request.
"""
from __future__ import annotations

import ctypes
import os
import sys
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

CLONE_NEWNET = 0x40000000
NETWORK_EVENTS = ("socket.__new__", "socket.bind", "socket.connect", "socket.getaddrinfo",
                  "socket.sendto", "socket.sendmsg", "socket.gethostbyname", "urllib.Request")
PROCESS_EVENTS = ("subprocess.Popen", "os.system", "os.exec", "os.posix_spawn", "os.spawn",
                  "os.fork", "os.forkpty", "pty.spawn", "os.startfile")
SIGNAL_EVENTS = ("os.kill", "os.killpg", "signal.pthread_kill")
INTROSPECTION_EVENTS = ("gc.get_objects", "gc.get_referrers", "gc.get_referents", "sys._current_frames",
                        "sys.settrace", "sys.setprofile")
FILE_EVENTS = ("os.remove", "os.rename", "os.rmdir", "os.mkdir", "os.chmod", "os.chown",
               "os.link", "os.symlink", "os.truncate", "os.utime", "shutil.rmtree", "shutil.copyfile")
WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_APPEND | os.O_TRUNC


def isolate_network() -> str:
    """Leave the host's network namespace if the OS lets us; say which isolation we have."""
    if not sys.platform.startswith("linux"):
        return "audit-hook"
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.unshare(CLONE_NEWNET) == 0:
        return "namespace"
    return "audit-hook"


@dataclass
class Sandbox:
    scratch: Path
    writable: list[Path]  # the scratch dir, the per-source build caches, TMPDIR
    hidden: list[Path]  # the evaluator's private dirs: not even readable
    toolchains: tuple[str, ...] = ()  # package dirs whose frames may start compilers
    violations: list[str] = field(default_factory=list)
    armed: bool = False
    _tripwires: dict[str, Any] = field(default_factory=dict)
    _threads: int = 0

    def arm(self) -> None:
        self._tripwires = tripwire_state()
        self._threads = threading.active_count()
        if not self.armed:
            self.armed = True
            sys.addaudithook(self._hook)

    def check(self) -> list[str]:
        """Violations so far, plus any tripwire or new thread seen since arm()."""
        now = tripwire_state()
        for key, before in self._tripwires.items():
            if now.get(key) != before:
                rule = "precision-flags" if key.startswith("flag:") else "patching"
                self._record(rule, f"{key.removeprefix('flag:')} changed")
        self._tripwires = now
        if threading.active_count() > self._threads:
            self._record("threads-processes", "started a thread")
            self._threads = threading.active_count()
        return list(self.violations)

    def _record(self, rule: str, detail: str) -> None:
        entry = f"{rule}: {detail}"
        if entry not in self.violations:
            self.violations.append(entry)

    def _refuse(self, rule: str, detail: str) -> None:
        self._record(rule, detail)
        raise PermissionError(f"ratchet sandbox: {detail} is not allowed in a candidate (rule {rule})")

    def _from_toolchain(self) -> bool:
        """Whether the nearest frame that is either the candidate's or a toolchain's (torch,
        triton) is a toolchain's: the compiler torch or triton starts may run; the candidate's
        own subprocess may not."""
        scratch = str(self.scratch)
        frame = sys._getframe(2)
        while frame is not None:
            name = frame.f_code.co_filename
            if name.startswith(scratch):
                return False
            if name.startswith(self.toolchains):
                return True
            frame = frame.f_back
        return False

    def _hook(self, event: str, args: tuple[Any, ...]) -> None:
        if not self.armed:
            return
        if event == "open":
            self._check_open(args)
        elif event.startswith(NETWORK_EVENTS):
            self._refuse("network", f"network access ({event})")
        elif event.startswith(PROCESS_EVENTS):
            if not self._from_toolchain():
                self._refuse("threads-processes", f"starting a process ({event})")
        elif event.startswith("ctypes."):
            if not self._from_toolchain():
                self._refuse("threads-processes", f"ctypes ({event})")
        elif event in SIGNAL_EVENTS:
            self._refuse("threads-processes", f"sending a signal ({event})")
        elif event in INTROSPECTION_EVENTS:
            self._refuse("dynamic-code", f"introspection ({event})")
        elif event == "object.__setattr__":
            obj = args[0] if args else None  # fires for function attributes such as __code__
            module = getattr(obj, "__module__", "")
            if (isinstance(module, str) and module.split(".")[0] in ("torch", "triton", "tools")
                    and not self._from_toolchain()):
                self._refuse("patching", f"patching {module}.{getattr(obj, '__qualname__', '?')}.{args[1]}")
        elif event in FILE_EVENTS:
            for path in args[:2]:
                if isinstance(path, (str, bytes, os.PathLike)) and not self._writable(path):
                    self._refuse("file-io", f"{event} outside the scratch directory")

    def _check_open(self, args: tuple[Any, ...]) -> None:
        path, mode, flags = (list(args) + [None, None, 0])[:3]
        if not isinstance(path, (str, bytes, os.PathLike)):
            return  # an fd
        resolved = _resolve(path)
        if any(_within(resolved, h) for h in self.hidden):
            self._refuse("file-io", "reading the evaluator's private files")
        writing = (isinstance(mode, str) and any(c in mode for c in "wax+")) or bool((flags or 0) & WRITE_FLAGS)
        if writing and not self._writable(path) and resolved != Path("/dev/null"):
            self._refuse("file-io", f"writing {resolved}")

    def _writable(self, path: Any) -> bool:
        resolved = _resolve(path)
        return any(_within(resolved, w) for w in self.writable)


def _resolve(path: Any) -> Path:
    if isinstance(path, bytes):
        path = os.fsdecode(path)
    return Path(os.path.realpath(os.fspath(path)))


def _within(path: Path, root: Path) -> bool:
    return path == root or root in path.parents


def tripwire_state() -> dict[str, Any]:
    """Identity of the functions timing and checking rely on, and the numeric flags."""
    import torch

    state: dict[str, Any] = {
        "flag:torch.backends.cuda.matmul.allow_tf32": torch.backends.cuda.matmul.allow_tf32,
        "flag:torch.backends.cudnn.allow_tf32": torch.backends.cudnn.allow_tf32,
        "flag:torch.backends.cuda.matmul.allow_fp16_reduced_precision_reduction":
            torch.backends.cuda.matmul.allow_fp16_reduced_precision_reduction,
        "flag:torch.backends.cuda.matmul.allow_bf16_reduced_precision_reduction":
            torch.backends.cuda.matmul.allow_bf16_reduced_precision_reduction,
        "flag:float32_matmul_precision": torch.get_float32_matmul_precision(),
        "flag:default_dtype": str(torch.get_default_dtype()),
        "flag:deterministic_fill": torch.utils.deterministic.fill_uninitialized_memory,
    }
    watched = {
        "torch.cuda.synchronize": torch.cuda.synchronize,
        "torch.cuda.Event": torch.cuda.Event,
        "torch.cuda.Event.record": torch.cuda.Event.record,
        "torch.cuda.Event.elapsed_time": torch.cuda.Event.elapsed_time,
        "torch.cuda.Event.synchronize": torch.cuda.Event.synchronize,
        "torch.cuda.current_stream": torch.cuda.current_stream,
        "torch.manual_seed": torch.manual_seed,
        "torch.randn": torch.randn,
        "torch.rand": torch.rand,
        "torch.randint": torch.randint,
        "torch.Tensor.to": torch.Tensor.to,
        "torch.Tensor.clone": torch.Tensor.clone,
        "torch.Tensor.copy_": torch.Tensor.copy_,
        "torch.nn.Module.__call__": torch.nn.Module.__call__,
        "time.perf_counter": __import__("time").perf_counter,
    }
    for name, obj in watched.items():
        state[name] = id(obj)
    return state
