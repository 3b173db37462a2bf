"""Worker processes as the trusted parent sees them: started as their Launch says (a candidate's
confined by tools/sandbox/, the reference's plain), in their own session (so the whole process
group dies on a timeout), with resource limits, a private log file for whatever they print, and
a request/reply channel on two pipes with a deadline on every reply.
"""
from __future__ import annotations

import os
import resource
import secrets
import select
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from tools.wire.protocol import Deadline, FrameReader, PeerClosed, ProtocolError, write_frame
from tools.processes.replies import MalformedReply
from tools.processes.replies import arena_limit, check as check_reply
from tools.processes.zygote import Forked
from tools.processes.zygote import start as start_forked
from tools.processes.allowance import Allowance
from tools.processes.launcher import die_with_parent, start_child
from tools.processes.proctree import tree_rss_bytes
from tools.sandbox import Launch

SANDBOX_KILL = "killed by the sandbox's system-call filter (SIGSYS)"
RESOURCE_LIMITS = {"core": resource.RLIMIT_CORE, "as": resource.RLIMIT_AS, "cpu": resource.RLIMIT_CPU,
                   "fsize": resource.RLIMIT_FSIZE}
WRITE_TIMEOUT_S = 60.0  # a request not taken in by then: the worker stopped reading (multi-GB CPU payloads take seconds)


class WorkerGone(Exception):
    """The worker timed out, died, or broke the protocol; `verdict` says which class, `check` the
    check that failed ("deadline": the evaluation's allowance ran out, tools/processes/allowance.py)."""

    def __init__(self, verdict: str, message: str, check: str = "worker") -> None:
        super().__init__(message)
        self.verdict = verdict
        self.check = check


@dataclass
class Limits:
    host_memory_bytes: int | None = None  # address-space limit (CPU devices) / RSS watchdog (CUDA)
    cpu_seconds: int | None = None
    file_bytes: int | None = None  # largest file the worker may write (its output log included)


class WorkerProcess:
    def __init__(self, config: dict[str, Any], *, launch: Callable[[tuple[int, ...]], Launch], cwd: Path,
                 log: Path, limits: Limits, cuda: bool, device_index: int = 0, payload: bytes = b"",
                 untrusted: bool = False, max_reply_bytes: int | None = None) -> None:
        to_child_r, self._to_child = os.pipe()
        self._from_child, from_child_w = os.pipe()
        self._memory, child_memory = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)  # device memory as fds
        self.log = log
        self.limits = limits
        self.cuda = cuda
        self._ready: dict[str, Any] | None = None  # the ready frame, when settle() read it
        self.allowance: Allowance | None = None  # the evaluation's deadline, once a candidate is handed over
        self.device_index = device_index
        self.untrusted = untrusted  # a candidate's worker: every reply header is checked (tools/processes/replies.py)
        self.max_reply_bytes = max_reply_bytes
        self.spawned_at = time.monotonic()
        self.environment: str | None = None  # what it was started from (tools/spawner.environment_fingerprint)
        plan = launch((to_child_r, from_child_w, child_memory.fileno()))
        self.wrapped = plan.fork is None and plan.argv[0] != sys.executable  # bwrap reports a signal death as 128 + signal
        self.proc: subprocess.Popen | Forked
        try:
            with open(log, "wb") as out:
                if plan.fork is not None:  # a fork of the zygote of its environment (tools/processes/zygote.py)
                    self.proc = start_forked(plan, (to_child_r, from_child_w, child_memory.fileno()), out.fileno(),
                                             self._limit_values(), str(cwd))
                else:
                    # its parent-death signal follows the thread that starts it: one that lasts (launcher.py)
                    self.proc = start_child(lambda: subprocess.Popen(
                        plan.argv, pass_fds=(to_child_r, from_child_w, child_memory.fileno(), *plan.pass_fds),
                        stdin=subprocess.DEVNULL,
                        stdout=out, stderr=subprocess.STDOUT, cwd=cwd, env=plan.env, start_new_session=True,
                        user=plan.user, group=plan.user, extra_groups=[] if plan.user is not None else None,
                        preexec_fn=self._set_limits,
                    ))
        finally:
            for fd in (to_child_r, from_child_w, *plan.close_after):
                os.close(fd)
            child_memory.close()
        self.reader = FrameReader(self._from_child)
        self.started = False  # its start-up answer was read (wait_ready): it may be holding something
        self.arena: Any = None  # our mapping of the worker's exchange buffer (CUDA)
        self.input_arena: Any = None  # our mapping of the buffer we write the worker's inputs into (CUDA)
        self.gate: Any = None  # our mapping of the worker's gate words, and the last pass number (tools/timing/gate.py)
        self.gate_seq = 0
        self._announce_limit = arena_limit({})  # device memory its next reply may announce (replies.arena_limit)
        os.set_blocking(self._to_child, False)  # every write has a deadline: a worker may stop reading
        try:
            write_frame(self._to_child, {**config, "confine": plan.confine}, payload, time.monotonic() + WRITE_TIMEOUT_S)
        except (Deadline, OSError):
            pass  # the worker died or stalled at once: its first read of a reply says how

    def _limit_values(self) -> dict[str, tuple[int, int]]:
        """The worker's resource limits (soft, hard), by tools/zygote/enter.py's names."""
        values = {"core": (0, 0)}
        if self.limits.host_memory_bytes and not self.cuda:
            values["as"] = (self.limits.host_memory_bytes, self.limits.host_memory_bytes)
        if self.limits.cpu_seconds:
            values["cpu"] = (self.limits.cpu_seconds, self.limits.cpu_seconds + 5)
        if self.limits.file_bytes:
            # Python ignores SIGXFSZ, so a write past the limit fails with EFBIG ("File too large")
            # in the candidate's own code; a compiler it runs is killed by SIGXFSZ instead
            values["fsize"] = (self.limits.file_bytes, self.limits.file_bytes)
        return values

    def _set_limits(self) -> None:  # runs in the child between fork and exec
        die_with_parent()  # workers run in their own session, out of reach of our process group
        for name, value in self._limit_values().items():
            resource.setrlimit(RESOURCE_LIMITS[name], value)

    @property
    def pid(self) -> int:
        return self.proc.pid

    def alive(self) -> bool:
        return self.proc.poll() is None

    def wait_ready(self, timeout: float) -> dict[str, Any]:
        if self._ready is not None:  # settle() took it
            header, self._ready = self._ready, None
            return header
        header, _ = self._read(timeout)
        self.started = True
        return self._checked(header)

    def settle(self, timeout: float) -> None:
        """Wait until the worker has started (its start-up's GPU work done), keeping its ready
        frame for wait_ready(): a quiet device is timed only with no worker starting on it."""
        if self._ready is None and not self.started:
            self._ready = self.wait_ready(timeout)

    BOOT_STEPS = ("main", "confined", "torch", "dynamo", "context", "triton", "ready")

    def boot_phases(self, ready: dict[str, Any]) -> dict[str, float]:
        """Seconds of each start-up step of this worker (its ready frame's stamps, on the monotonic
        clock it was spawned by), as result phases: `boot` from spawn to ready, then `boot_<step>`,
        `boot_main` being the interpreter and bwrap. A diagnostic only: no verdict reads it; a
        worker that sent no stamps (or odd ones) gives none."""
        boot = ready.get("boot")
        stamps: dict[str, Any] = boot if isinstance(boot, dict) else {}
        times: list[Any] = [self.spawned_at] + [stamps.get(step) for step in self.BOOT_STEPS]
        if any(not isinstance(t, (int, float)) for t in times) or sorted(times) != times:
            return {}
        phases = {f"boot_{step}": round(b - a, 4) for step, a, b in zip(self.BOOT_STEPS, times, times[1:])}
        phases["boot"] = round(times[-1] - self.spawned_at, 4)
        return phases

    def _checked(self, header: dict[str, Any]) -> dict[str, Any]:
        if not self.untrusted:
            return header
        try:
            return check_reply(header, self._announce_limit)
        except MalformedReply as exc:
            self.kill()
            raise WorkerGone("rejected", f"the candidate's worker sent a malformed reply ({exc})") from None

    def send(self, msg: dict[str, Any], payload: bytes = b"", timeout: float = WRITE_TIMEOUT_S) -> None:
        """Send a request without waiting; reply() collects the answer. A frame already waiting
        on the result channel was written unasked: a forgery."""
        if select.select([self._from_child], [], [], 0)[0] and self.alive():
            self.kill()
            raise WorkerGone("rejected", "the worker wrote to the result channel unasked (forged output)")
        self._nonce = secrets.token_hex(8)
        self._announce_limit = arena_limit(msg)
        try:
            write_frame(self._to_child, {**msg, "nonce": self._nonce}, payload, time.monotonic() + timeout)
        except Deadline:
            self.kill()
            raise WorkerGone("timeout", f"the worker stopped reading its requests for {timeout:.0f} s; "
                                        "the process group was killed") from None
        except (BrokenPipeError, OSError):
            raise self._gone("crashed") from None

    def reply(self, timeout: float) -> tuple[dict[str, Any], bytes]:
        header, payload = self._read(timeout)
        if header.get("nonce") != self._nonce:
            self.kill()
            raise WorkerGone("rejected", "a reply on the result channel did not answer the request (forged output)")
        return self._checked(header), payload

    def request(self, msg: dict[str, Any], timeout: float, payload: bytes = b"") -> tuple[dict[str, Any], bytes]:
        """Send a request and wait for its reply; raises WorkerGone on timeout, death or forgery.
        With an `allowance`, the wait is charged to it and is at most what is left of it."""
        allowance = self.allowance
        limit = timeout if allowance is None else min(timeout, allowance.left())
        started = time.monotonic()
        try:
            self.send(msg, payload, max(limit, 5.0))
            return self.reply(limit)
        except WorkerGone as exc:
            if allowance is None or exc.verdict != "timeout" or limit >= timeout:
                raise
            raise WorkerGone("timeout", f"the evaluation's deadline passed: the candidate's worker took "
                                        f"{allowance.seconds:.0f} s of replies in all; the process group was killed",
                             check="deadline") from None
        finally:
            if allowance is not None:
                allowance.spent += time.monotonic() - started

    def map_arena(self, header: dict[str, Any]) -> Any:
        """Our mapping of the worker's output arena, remapped when a reply announces a new one."""
        from tools.wire.transport import open_arena

        if header.get("arena"):
            if not self.cuda:
                self.kill()
                raise WorkerGone("rejected", "the worker announced device memory on a CPU run")
            self.arena = None
            self.arena = open_arena(header["arena"], self._receive_fd(), self.device_index)
        return self.arena

    def _receive_fd(self, timeout: float = 30.0) -> int:
        """The memory handle a reply announced, from the worker's socket (sent before the reply)."""
        if not select.select([self._memory], [], [], timeout)[0]:
            raise WorkerGone("rejected", "the worker announced device memory but sent no handle for it")
        try:
            _, fds, _, _ = socket.recv_fds(self._memory, 1, 4)
        except OSError as exc:
            raise WorkerGone("crashed", f"the worker's memory socket failed ({exc})") from None
        for extra in fds[1:]:
            os.close(extra)
        if not fds:
            raise WorkerGone("rejected", "the worker announced device memory but sent no handle for it")
        return fds[0]

    def outputs(self, header: dict[str, Any], payload: bytes) -> Any:
        """The value tree of a reply. CUDA tensors are views into the worker's arena, valid
        until the next request to this worker."""
        from tools.wire.transport import decode

        return decode(header["tree"], payload, self.map_arena(header))

    def input_arena_of(self, nbytes: int, timeout: float) -> Any:
        """Our mapping of the worker's input arena, at least `nbytes` long (asked to grow when
        smaller): where the parent writes the candidate's inputs."""
        if self.input_arena is None or self.input_arena.numel() < nbytes:
            self.input_arena = None
            self.input_arena = self._exported({"op": "input_arena", "bytes": nbytes}, nbytes, "an input arena", timeout)
        return self.input_arena

    def gate_of(self, timeout: float) -> Any:
        """Our mapping of the worker's gate (tools/wire/stream_ops.py), made on first use."""
        from tools.wire.stream_ops import GATE_BYTES

        if self.gate is None:
            self.gate = self._exported({"op": "gate"}, GATE_BYTES, "a gate", timeout)[:GATE_BYTES]
        return self.gate

    def _exported(self, msg: dict[str, Any], nbytes: int, what: str, timeout: float) -> Any:
        """Ask the worker for device memory of at least `nbytes` it exports, and map it."""
        from tools.wire.transport import TransportError, open_arena

        header, _ = self.request(msg, timeout)
        if header.get("op") == "error":  # out of GPU memory, most likely
            kind = str(header.get("kind")) if header.get("kind") in ("runtime_error", "crashed") else "runtime_error"
            raise WorkerGone(kind, f"no room for {what}: {header.get('message', '')}")
        if header.get("op") != msg["op"] or int((header.get("arena") or {}).get("nbytes", 0)) < nbytes:
            raise WorkerGone("rejected", f"the worker answered the request for {what} with something else")
        try:
            return open_arena(header["arena"], self._receive_fd(), self.device_index)
        except (TransportError, RuntimeError, KeyError, TypeError, ValueError) as exc:
            raise WorkerGone("rejected", f"the worker's {what} could not be mapped ({exc})") from None

    def unmap(self) -> None:
        """Drop our mappings of the worker's memory (before the memory behind them goes away)."""
        self.arena = None
        self.input_arena = None
        self.gate = None

    def _read(self, timeout: float) -> tuple[dict[str, Any], bytes]:
        deadline = time.monotonic() + timeout
        try:
            return self.reader.read(deadline, on_wait=self._watchdog, max_payload=self.max_reply_bytes)
        except Deadline:
            self.kill()
            tail = self.log_tail(800).strip()
            output = f"\nits last output:\n{tail}" if tail else ""
            raise WorkerGone("timeout", f"no answer within {timeout:.0f} s; the process group was killed{output}") from None
        except PeerClosed:
            raise self._gone("crashed") from None
        except ProtocolError as exc:  # an honest worker never does: it is forging, or flooding us
            self.kill()
            raise WorkerGone("rejected", f"the worker broke the protocol ({exc})") from None

    def _watchdog(self) -> None:
        limit = self.limits.host_memory_bytes
        pid = self.proc.known_pid if isinstance(self.proc, Forked) else self.proc.pid  # not waiting for a fork
        if limit and self.cuda and pid > 0 and tree_rss_bytes(pid) > limit:
            self.kill()
            raise WorkerGone("runtime_error", f"out of host memory: the worker passed its {limit >> 20} MiB limit and was killed")

    def _gone(self, verdict: str) -> WorkerGone:
        code: int | None
        try:
            code = self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.kill()
            code = self.proc.returncode
        tail = self.log_tail(600)
        died_of = -code if code is not None and code < 0 else None
        if self.wrapped and code is not None and 128 < code < 128 + 65:
            died_of = code - 128
        if died_of is not None:
            how = f"killed by {_signal_name(died_of)}"
            if died_of == signal.SIGSEGV:
                how = "segmentation fault (SIGSEGV)"
            elif died_of == signal.SIGKILL and "MemoryError" not in tail:
                how = "killed by SIGKILL (often: out of memory)"
            elif died_of == signal.SIGXCPU:
                how = "ran past its CPU-time limit (SIGXCPU)"
            elif died_of == signal.SIGXFSZ:
                how = "wrote a file past its size limit (SIGXFSZ)"
            elif died_of == signal.SIGSYS:
                return WorkerGone("rejected", f"the worker was {SANDBOX_KILL}: it made a system call that only an "
                                              "attack makes (another process's memory, ptrace, kernel modules)")
        else:
            how = f"exited with status {code} (os._exit or a fatal error)"
        message = f"the worker process died: {how}"
        if isinstance(self.proc, Forked) and self.proc.failure:
            message = f"the worker process was not started: {self.proc.failure}"
        if tail.strip():
            message += f"\nlast output:\n{tail.strip()}"
        return WorkerGone(verdict, message)

    def log_tail(self, chars: int) -> str:
        try:
            with open(self.log, "rb") as f:
                f.seek(0, os.SEEK_END)
                size = f.tell()
                f.seek(max(0, size - chars))
                return f.read().decode(errors="replace")
        except OSError:
            return ""

    def stop(self) -> None:
        """SIGKILL the worker's process group, and nothing else: its pipes stay with whoever is
        talking to it (a reaping thread), which reads its death and calls kill()."""
        if isinstance(self.proc, Forked):
            self.proc.stop()  # its sandbox's holder too: nothing of the pid namespace outlives it
        elif self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass

    def kill(self) -> None:
        self.unmap()
        self.stop()
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            pass
        if isinstance(self.proc, Forked):
            self.proc.release()
        for fd in (self._to_child, self._from_child):
            try:
                os.close(fd)
            except OSError:
                pass
        self._to_child = self._from_child = -1
        self._memory.close()

    def close(self, grace: float = 5.0) -> None:
        """Ask the worker to exit; kill it if it does not within `grace` seconds. One never asked
        whether it started (a spare still starting up) holds nothing of ours: killed at once, not
        told to exit once it has started (seconds, at the end of every evaluator's life)."""
        if self.proc.poll() is None and self._to_child >= 0 and self.started:
            try:
                write_frame(self._to_child, {"op": "exit"}, deadline=time.monotonic() + 5)
                self.proc.wait(timeout=grace)
            except (OSError, Deadline, subprocess.TimeoutExpired):
                pass  # it did not go: killed below
        self.kill()


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"
