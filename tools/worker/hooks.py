"""The Python-level first filter inside a candidate's worker (the static guard's run-time twin).

What contains a candidate is the operating system (tools/sandbox/): this module only catches, cheaply
and with a clear rule name, what a candidate tries in Python. Before candidate code is imported
the worker calls `Sandbox.arm()`. From then on an audit hook (which Python offers no way to
remove) refuses network access; process starts of anything but the toolchain's executables,
whoever asks; ctypes and thread starts while any candidate frame is on the stack (so a torch
helper handed a callable does not launder it); garbage-collector and frame introspection;
signals; patching of torch's, triton's or the evaluator's classes; and writes outside the
scratch directory. Each refusal is recorded with its rule and raised in the candidate as
PermissionError, so the parent rejects the candidate even if it swallowed the error.
Tripwires compare torch's timing, sync and precision state before and after every request.
A candidate that owns its process can switch all of this off: nothing escapes by doing so.
"""
from __future__ import annotations

import os
import shutil
import sys
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

NETWORK_EVENTS = ("socket.__new__", "socket.bind", "socket.connect", "socket.getaddrinfo",
                  "socket.sendto", "socket.sendmsg", "socket.gethostbyname", "urllib.Request")
PROCESS_EVENTS = ("subprocess.Popen", "os.system", "os.exec", "os.posix_spawn", "os.spawn",
                  "os.fork", "os.forkpty", "pty.spawn", "os.startfile")
SIGNAL_EVENTS = ("os.kill", "os.killpg", "signal.pthread_kill")
INTROSPECTION_EVENTS = ("gc.get_objects", "gc.get_referrers", "gc.get_referents", "sys._current_frames",
                        "sys.settrace", "sys.setprofile")
# Attributes that hand out a frame (the audit event object.__getattr__ names them): from a frame,
# f_back and f_locals lead to the worker's own state (launch counter, sandbox, request nonce).
FRAME_ATTRIBUTES = frozenset({"gi_frame", "cr_frame", "ag_frame", "tb_frame"})
FILE_EVENTS = ("os.remove", "os.rename", "os.rmdir", "os.mkdir", "os.chmod", "os.chown",
               "os.link", "os.symlink", "os.truncate", "os.utime", "shutil.rmtree", "shutil.copyfile")
STDLIB_DIR = os.path.dirname(os.__file__)
# standard-library modules that read a caller's frame only to name what it defines
NAMING_FILES = frozenset(m.__file__ for m in (__import__("typing"), __import__("enum"), __import__("collections"),
                                              __import__("dataclasses"), __import__("abc"), __import__("functools")))
WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_APPEND | os.O_TRUNC


@dataclass
class Sandbox:
    scratch: Path
    writable: list[Path]  # the scratch dir, the per-source build caches, TMPDIR
    hidden: list[Path]  # the evaluator's private dirs: not even readable
    toolchains: tuple[str, ...] = ()  # package dirs (torch, triton): their frames are not the candidate's
    executables: tuple[str, ...] = ()  # files, or directories below which, a process may start
    own_sockets: tuple[int, ...] = ()  # the worker's own socket to the parent (device memory handles)
    violations: list[str] = field(default_factory=list)
    armed: bool = False
    _tripwires: dict[str, Any] = field(default_factory=dict)
    _threads: int = 0
    _state: Any = None
    _busy: bool = False  # inside the hook: the hook's own frame walks must not re-enter it

    def arm(self) -> None:
        self._state = tripwire_state  # bound now: rebinding the module's name later changes nothing
        self._tripwires = self._state()
        self._threads = threading.active_count()
        if not self.armed:
            self.armed = True
            self._guard_threads()
            sys.addaudithook(self._hook)

    def _guard_threads(self) -> None:
        """Python 3.11 audits no thread start, and counting live threads misses one that is
        joined before the check: refuse new threads where the candidate's code starts them."""
        import _thread

        def guarded(start):
            def start_new_thread(*args, **kwargs):
                if self._candidate_on_stack(sys._getframe(1)):
                    self._refuse("threads-processes", "starting a thread")
                return start(*args, **kwargs)

            return start_new_thread

        for module, name in ((_thread, "start_new_thread"), (_thread, "start_joinable_thread"),
                             (threading, "_start_new_thread"), (threading, "_start_joinable_thread")):
            if hasattr(module, name):
                setattr(module, name, guarded(getattr(module, name)))

    def check(self) -> list[str]:
        """Violations so far, plus any tripwire or new thread seen since arm()."""
        now = self._state()
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

    def _candidate_on_stack(self, frame: Any) -> bool:
        """Whether any frame from `frame` up is the candidate's (however many torch or triton
        frames lie in between)."""
        scratch = str(self.scratch)
        while frame is not None:
            if frame.f_code.co_filename.startswith(scratch):
                return True
            frame = frame.f_back
        return False

    def _executable(self, path: Any, env: Any = None) -> bool:
        """Whether `path` (a name looked up on PATH, or a path) is one of the toolchain's executables."""
        if isinstance(path, bytes):
            path = os.fsdecode(path)
        if not isinstance(path, (str, os.PathLike)):
            return False
        path = os.fspath(path)
        if os.sep not in path:
            search = env.get("PATH") if isinstance(env, dict) else None
            path = shutil.which(path, path=search) or path
        real = os.path.realpath(path)
        return any(real == e or real.startswith(e.rstrip(os.sep) + os.sep) for e in self.executables)

    def _nearest(self, frame: Any) -> str | None:
        """'candidate' or 'toolchain': whose frame comes first walking up from `frame`; None when
        neither is on the stack (the worker's own code)."""
        scratch = str(self.scratch)
        while frame is not None:
            name = frame.f_code.co_filename
            if name.startswith(scratch):
                return "candidate"
            if name.startswith(self.toolchains):
                return "toolchain"
            frame = frame.f_back
        return None

    def _hook(self, event: str, args: tuple[Any, ...]) -> None:
        if not self.armed or self._busy:
            return
        self._busy = True
        try:
            self._audit(event, args)
        finally:
            self._busy = False

    def _audit(self, event: str, args: tuple[Any, ...]) -> None:
        if event == "open":
            self._check_open(args)
        elif event.startswith(NETWORK_EVENTS):
            if not (event == "socket.sendmsg" and _fileno(args[0]) in self.own_sockets):
                self._refuse("network", f"network access ({event})")
        elif event.startswith(PROCESS_EVENTS):
            self._check_process(event, args)
        elif event.startswith("ctypes."):
            if self._candidate_on_stack(sys._getframe(2)):
                self._refuse("threads-processes", f"ctypes ({event})")
        elif event in SIGNAL_EVENTS:
            self._refuse("threads-processes", f"sending a signal ({event})")
        elif event in INTROSPECTION_EVENTS:
            self._refuse("dynamic-code", f"introspection ({event})")
        elif event == "object.__getattr__":
            if len(args) > 1 and args[1] in FRAME_ATTRIBUTES and self._nearest(sys._getframe(2)) == "candidate":
                self._refuse("dynamic-code", f"introspection (reading {args[1]})")
        elif event == "sys._getframe":
            if self._frame_by_candidate(sys._getframe(2)):
                self._refuse("dynamic-code", "introspection (sys._getframe)")
        elif event == "object.__setattr__":
            obj = args[0] if args else None  # fires for function attributes such as __code__
            module = getattr(obj, "__module__", "")
            if (isinstance(module, str) and module.split(".")[0] in ("torch", "triton", "tools")
                    and self._nearest(sys._getframe(2)) != "toolchain"):
                self._refuse("patching", f"patching {module}.{getattr(obj, '__qualname__', '?')}.{args[1]}")
        elif event in FILE_EVENTS:
            for path in args[:2]:
                if isinstance(path, (str, bytes, os.PathLike)) and not self._writable(path):
                    self._refuse("file-io", f"{event} {_resolve(path)} (outside the scratch directory)")

    def _check_process(self, event: str, args: tuple[Any, ...]) -> None:
        """A process may start only from one of the toolchain's executables, whoever asks; a
        shell command line (os.system) or a bare fork never."""
        if event == "subprocess.Popen":
            executable, argv, env = args[0], args[1], args[3] if len(args) > 3 else None
            target = executable or (argv[0] if isinstance(argv, (list, tuple)) and argv else argv)
        elif event in ("os.exec", "os.posix_spawn"):
            target, env = args[0], args[2] if len(args) > 2 else None
        elif event == "os.spawn":
            target, env = args[1], args[3] if len(args) > 3 else None
        else:  # os.system, os.fork, os.forkpty, pty.spawn, os.startfile
            self._refuse("threads-processes", f"starting a process ({event})")
            return
        if not self._executable(target, env):
            self._refuse("threads-processes", f"starting a process ({event} {target!r}: not one of the toolchain's executables)")

    def _frame_by_candidate(self, caller: Any) -> bool:
        """Whether the candidate asked for a frame: itself, or through the standard library
        (inspect, traceback). typing, enum, collections and dataclasses call sys._getframe on
        a caller's behalf only to name things, and torch's or triton's own calls are theirs."""
        if caller is None or caller.f_code.co_filename in NAMING_FILES:
            return False
        frame = caller
        while frame is not None and _stdlib(frame.f_code.co_filename):
            frame = frame.f_back
        return frame is not None and frame.f_code.co_filename.startswith(str(self.scratch))

    def _check_open(self, args: tuple[Any, ...]) -> None:
        path, mode, flags = (list(args) + [None, None, 0])[:3]
        if not isinstance(path, (str, bytes, os.PathLike)):
            return  # an fd
        resolved = _resolve(path)
        if any(_within(resolved, h) for h in self.hidden):
            self._refuse("file-io", "reading the evaluator's private files")
        parts = resolved.parts
        if len(parts) > 2 and parts[1] == "proc" and parts[2].isdigit() and int(parts[2]) != os.getpid():
            self._refuse("file-io", f"reading another process's {'/'.join(parts[3:]) or 'entry'} in /proc")
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
        "flag:deterministic_fill": torch.utils.deterministic.fill_uninitialized_memory,  # type: ignore[attr-defined]
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
    state.update(_evaluator_functions())
    return state


def _evaluator_functions() -> dict[str, int]:
    """Identity of the worker's own functions that count, record and report (class attributes
    can be rebound with no audit event at all)."""
    import triton.runtime.jit as jit

    from tools.wire import transport
    from tools.worker import instrument

    watched: dict[str, Any] = {
        "tools.worker.hooks.Sandbox.check": Sandbox.check, "tools.worker.hooks.Sandbox._hook": Sandbox._hook,
        "tools.worker.hooks.Sandbox._audit": Sandbox._audit, "tools.worker.hooks.Sandbox._refuse": Sandbox._refuse,
        "tools.worker.instrument.LaunchCounter.reset": instrument.LaunchCounter.reset,
        "tools.worker.instrument.LaunchCounter._counting_run": instrument.LaunchCounter._counting_run,
        "tools.worker.instrument.LaunchCounter._counted": instrument.LaunchCounter._counted,
        "tools.worker.instrument.OpRecorder.__torch_dispatch__": instrument.OpRecorder.__torch_dispatch__,
        "tools.wire.transport.encode": transport.encode, "tools.wire.transport.decode": transport.decode,
        "triton.JITFunction.run": jit.JITFunction.run,
    }
    try:
        import triton.runtime.interpreter as interp

        watched["triton.InterpretedFunction.run"] = interp.InterpretedFunction.run
    except ImportError:
        pass
    return {name: id(obj) for name, obj in watched.items()}


def _stdlib(filename: str) -> bool:
    return filename.startswith("<") or (filename.startswith(STDLIB_DIR) and "-packages" not in filename)


def toolchain_dirs() -> tuple[str, ...]:
    import torch
    import triton

    return (str(Path(triton.__file__).parent), str(Path(torch.__file__).parent))


def _fileno(sock: Any) -> int:
    try:
        return int(sock.fileno())
    except (AttributeError, OSError, TypeError, ValueError):
        return -1
