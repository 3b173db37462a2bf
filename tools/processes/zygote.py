"""Workers forked from a zygote (parent side): one pre-imported process per worker environment,
and the handle of a worker it made.

`python -m tools.zygote` (tools/zygote/) imports torch, dynamo, Triton and the worker's modules
once; every later worker of the same environment is a fork of it, ready in a fraction of the
seconds an exec takes. Nothing waits for a zygote's imports: a request waits in its socket, and
the worker's pid, wait status or failure come later on a status socket of its own. A candidate's worker still gets a bubblewrap sandbox of its own: bwrap
starts a holder (a Python that waits on its stdin) in fresh namespaces and a fresh file system
view, the zygote's fork joins them, and the worker is the fork's fork, inside its pid namespace
(tools/zygote/enter.py says what it applies and checks). One sandbox per worker, as with exec:
two candidates' workers share no namespace, file system, tmpfs or uid.

Zygotes are kept per environment (less what differs per worker: its home, temporary and cache
directories, which nothing reads at import), at most MAX_ZYGOTES at once, for the life of the
evaluator's process. Each is its child, ends when the evaluator's end of its socket closes (the
evaluator exited or died), and holds nothing that is not in every worker of its environment anyway.
Only a root evaluator forks, and only where candidates cannot reach a zygote
(tools/sandbox Sandbox.forks_workers); elsewhere, and with RATCHET_WORKER_START=exec, every
worker is started by exec (the way before the zygote).
"""
from __future__ import annotations

import atexit
import base64
import json
import os
import select
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections import OrderedDict
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tools.processes.holder import HolderFailed, hold
from tools.processes.holder import kill as holder_kill

if TYPE_CHECKING:
    from tools.sandbox import Launch

# read per worker (after the fork), never at import: a zygote serves workers that differ in these
PER_WORKER = ("HOME", "TMPDIR", "TORCH_EXTENSIONS_DIR", "TRITON_HOME", "TRITON_CACHE_DIR")
READY_TIMEOUT_S = 300.0  # importing torch where it has no bytecode took 11 s on an H100 machine
ENTER_FAILED = 125  # a worker's exit status when it was not started (as tools/zygote/__main__.py's)
# differs between processes that import alike: pytest names the running test in it
VOLATILE = ("PYTEST_CURRENT_TEST",)
MAX_ZYGOTES = 3  # the candidates' and the CUDA builds' environments of one evaluator, and one more


class ZygoteFailed(Exception):
    """The zygote could not be started or could not fork; str() is one line."""


def fork_enabled() -> bool:
    return os.environ.get("RATCHET_WORKER_START", "fork") != "exec" and hasattr(os, "pidfd_open")


class Zygote:
    def __init__(self, env: dict[str, str]) -> None:
        self.key = _key(env)
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self.home = Path(tempfile.mkdtemp(prefix="ratchet-zygote-"))
        base = {k: v for k, v in env.items() if k not in PER_WORKER}
        base.update(HOME=str(self.home), TMPDIR=str(self.home))
        self.log = self.home / "zygote.log"
        with open(self.log, "wb") as out:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "tools.zygote", str(theirs.fileno())], pass_fds=(theirs.fileno(),),
                stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT, cwd=str(self.home), env=base,
                start_new_session=True)  # it ends when our end of its socket closes (tools/zygote/__main__.py)
        theirs.close()
        self.limits = _proc_limits(self.proc.pid)  # what it inherited from us, to see them changed
        self.sock = ours
        self.sock.settimeout(READY_TIMEOUT_S)  # a request waits in the socket while the zygote imports
        self._lock = threading.Lock()
        # requests reserved (by zygote_for, under the registry's lock) or sent whose worker it has not
        # forked yet: never evicted while any. Counted from the reservation, not the send, so that
        # another environment's start cannot evict it between the two (seen under a full suite's
        # load: a batch's worker "not started: the zygote ended before it forked this worker: -9")
        self.pending = 0
        self.retired = False  # discarded while requests were pending: closed when the last is answered

    def tail(self) -> str:
        """The last line the zygote printed (why it ended), or its exit status."""
        try:
            text = self.log.read_text(errors="replace").strip().splitlines()
        except OSError:
            text = []
        return text[-1] if text else f"exit status {self.proc.poll()}"

    def alive(self) -> bool:
        return self.proc.poll() is None

    def usable(self) -> bool:
        """Alive and as it was started: resource limits unchanged, no tracer. Only a candidate's
        worker of the evaluator's own uid could change them (best-effort without bwrap or a uid
        of its own, where workers are exec'd: tools/sandbox Sandbox.isolates_workers, but a zygote of
        another evaluator in this process may be in reach), and every fork would inherit them."""
        if not self.alive():
            return False
        try:
            with open(f"/proc/{self.proc.pid}/status") as f:
                traced = any(line.startswith("TracerPid:") and line.split()[1] != "0" for line in f)
            return not traced and _proc_limits(self.proc.pid) == self.limits
        except OSError:
            return False

    def fork(self, request: dict[str, Any], fds: list[int]) -> None:
        """Send one request, on the reservation zygote_for() made for it (released if it cannot go)."""
        data = json.dumps(request).encode()
        with self._lock:
            try:
                if self.sock.fileno() < 0:
                    raise ZygoteFailed("the worker zygote was closed")
                try:
                    socket.send_fds(self.sock, [data], fds)
                except OSError as exc:
                    raise ZygoteFailed(f"the worker zygote is gone ({exc}): {self.tail()}") from None
            except ZygoteFailed:
                self.answered()
                raise

    def answered(self) -> None:
        """One request's worker was forked (or refused), or its request could not be sent; a
        discarded zygote closes with its last one."""
        with _registry:  # the lock under which zygote_for() reserves and evicts
            self.pending -= 1
            last = self.retired and self.pending <= 0
        if last:
            self.close()

    def close(self) -> None:
        """Killed, not asked: it holds nothing to flush, and an interpreter with torch took about a
        second to shut down politely (twice that for a cold `ratchet eval` on the CPU, one per
        zygote). The workers it made live on (each has a keeper of its own)."""
        with self._lock:
            self.sock.close()
        self.proc.kill()
        self.proc.wait()
        for p in (self.log, self.home):
            try:
                p.unlink() if p.is_file() else p.rmdir()
            except OSError:
                pass


_zygotes: OrderedDict[tuple[tuple[str, str], ...], Zygote] = OrderedDict()  # least recently used first
_starting: dict[tuple[tuple[str, str], ...], threading.Lock] = {}
_registry = threading.Lock()


def _key(env: dict[str, str]) -> tuple[tuple[str, str], ...]:
    return tuple(sorted((k, v) for k, v in env.items() if k not in PER_WORKER and k not in VOLATILE))


def zygote_for(env: dict[str, str], reserve: bool = True) -> Zygote:
    """The zygote of workers with environment `env`, started the first time it is asked for, with
    one request reserved on it (Zygote.fork sends it; `reserve=False`: started only). At most MAX_ZYGOTES live: the least
    recently used with nothing reserved goes when another starts (its workers live on: each has
    its own keeper, which does not die with the zygote)."""
    key = _key(env)
    with _registry:
        slot = _starting.setdefault(key, threading.Lock())
    with slot:  # one start per environment; other environments' starts go on meanwhile
        with _registry:
            zygote = _zygotes.get(key)
            if zygote is not None and zygote.usable():
                _zygotes.move_to_end(key)
                zygote.pending += reserve
                return zygote
        if zygote is not None:  # dead, or tampered with: replaced
            discard(zygote)
        zygote = Zygote(env)
        with _registry:
            _zygotes[key] = zygote
            _zygotes.move_to_end(key)
            zygote.pending += reserve
            idle = [k for k, z in _zygotes.items() if k != key and z.pending == 0]  # least recently used first
            evicted = [_zygotes.pop(k) for k in idle[:max(0, len(_zygotes) - MAX_ZYGOTES)]]
        for old in evicted:
            old.close()
        return zygote


@atexit.register
def close_all() -> None:
    with _registry:
        zygotes = list(_zygotes.values())
        _zygotes.clear()
    for zygote in zygotes:
        zygote.close()


class Forked:
    """A worker forked by a zygote, as the parent sees it (what process.py used of Popen). Asking
    for it does not wait for the zygote: the request waits in the zygote's socket while it imports,
    and the worker's pid, exit status or failure arrive later on its status socket."""

    def __init__(self, status: socket.socket | None, holder: subprocess.Popen | None, zygote: Zygote | None = None,
                 *, returncode: int | None = None) -> None:
        self._status = status
        self.holder = holder
        self.zygote = zygote
        self._pid = -1
        self.returncode = returncode
        self.failure: str | None = None  # why the worker never ran (the zygote could not make it)
        self._answered = False
        self._stopped = False  # stop() was called: a worker the zygote could not make after that was killed

    def _take(self, message: bytes) -> None:
        if self._pid < 0 and self.zygote is not None and not self._answered:
            self._answered = True  # the zygote is done with our request, whatever this says
            self.zygote.answered()
        if not message:  # the keeper is gone without a word, or the zygote before it forked one
            if self._pid < 0 and self.returncode is None and not self._stopped:
                if self.zygote is not None and not self.zygote.alive():
                    self.failure = f"the worker zygote ended before it forked this worker: {self.zygote.tail()}"
                    discard(self.zygote)
                else:  # the zygote lives (and serves others): only this request's keeper is gone
                    self.failure = "the worker's keeper ended before it reported the worker"
            self.returncode = -signal.SIGKILL if self.returncode is None else self.returncode
            self._close_status()
            return
        try:
            reply = json.loads(message)
        except ValueError:
            reply = {"error": f"an unreadable report {message[:80]!r}"}
        if "pid" in reply:
            self._pid = int(reply["pid"])
        elif "exit" in reply:
            self.returncode = os.waitstatus_to_exitcode(int(reply["exit"]))
        elif "error" in reply and self._stopped:  # its sandbox was gone before it was forked into it
            self.returncode = -signal.SIGKILL
        elif "error" in reply:
            self.failure = f"the worker zygote could not start a worker: {reply['error']}"
            self.returncode = ENTER_FAILED
            if self.zygote is not None:
                discard(self.zygote)  # the next worker of its environment gets a new one

    def _close_status(self) -> None:
        if self._status is not None:
            self._status.close()
            self._status = None

    @property
    def pid(self) -> int:
        """The worker's pid, once the zygote has forked it (waits for that, as long as a zygote's
        imports may take); -1 for a worker that was never made."""
        deadline = time.monotonic() + READY_TIMEOUT_S
        while True:
            self.poll()
            left = deadline - time.monotonic()
            if self._pid >= 0 or self.returncode is not None or self._status is None or left <= 0:
                return self._pid
            select.select([self._status], [], [], left)

    @property
    def known_pid(self) -> int:
        """The worker's pid if the zygote has said it yet, else -1 (never waits)."""
        self.poll()
        return self._pid

    def poll(self) -> int | None:
        while self.returncode is None and self._status is not None and select.select([self._status], [], [], 0)[0]:
            try:
                message = self._status.recv(4096)
            except ConnectionResetError:  # the keeper (or the zygote) went with a report unread: gone, as EOF says
                message = b""
            self._take(message)
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        deadline = None if timeout is None else time.monotonic() + timeout
        if self._stopped and self.poll() is None and self._pid < 0:
            # stopped before the zygote forked it (the request waits while the zygote imports, tens of
            # seconds on a loaded machine: a Ctrl-C's clean-up waited that long): abandoned, not awaited.
            # Its keeper, forked later, finds its status socket closed and ends with its group.
            if self.zygote is not None and not self._answered:
                self._answered = True
                self.zygote.answered()
            self.returncode = -signal.SIGKILL
            self._close_status()
            return self.returncode
        while self.poll() is None:
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                raise subprocess.TimeoutExpired("worker", timeout or 0)
            if self._status is None:
                break
            select.select([self._status], [], [], left)
        assert self.returncode is not None
        return self.returncode

    def stop(self) -> None:
        """SIGKILL the worker's process group (its keeper does, also when it is forked after this)
        and its sandbox's holder (the pid namespace, and everything left in it, dies with bwrap)."""
        self._stopped = True
        if self._status is not None and self.returncode is None:
            try:
                self._status.send(b"kill")
            except OSError:
                pass
        if self.holder is not None:
            holder_kill(self.holder, wait=False)

    def release(self) -> None:
        """After the worker's end: close its channels and reap its holder."""
        self._close_status()
        if self.holder is not None:
            holder_kill(self.holder)
            for pipe in (self.holder.stdin, self.holder.stdout):
                if pipe is not None:
                    pipe.close()


def start(plan: "Launch", worker_fds: tuple[int, ...], log_fd: int, limits: dict[str, tuple[int, int]],
          cwd: str) -> Forked:
    """Fork one worker as `plan.fork` (tools/sandbox Launch.fork) says: in a sandbox of its own
    when it names a holder, else plain (the reference worker, or best-effort without bwrap)."""
    fork = plan.fork
    assert fork is not None
    holder: subprocess.Popen | None = None
    namespaces: dict[str, int] = {}
    if fork.holder:
        try:
            holder, namespaces, failed = hold(fork.holder, log_fd)
        except HolderFailed as exc:
            raise ZygoteFailed(str(exc)) from None
        if failed is not None:
            return Forked(None, None, returncode=failed)
    spec = {"env": plan.env, "cwd": fork.cwd or cwd, "limits": limits, "confined": fork.confined,
            "sandboxed": bool(fork.holder), "uid": fork.uid,
            "seccomp": base64.b64encode(fork.seccomp).decode() if fork.seccomp else None}
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    fds = [*worker_fds, log_fd, theirs.fileno(), *namespaces.values()]
    request = {"fds": len(fds), "worker": [0, 1, 2], "log": 3, "status": 4,
               "namespaces": {name: 5 + i for i, name in enumerate(namespaces)}, "spec": spec}
    try:
        zygote = zygote_for(plan.env)
        try:
            zygote.fork(request, fds)
        except ZygoteFailed:  # closed meanwhile, to make room for another environment's: once more
            zygote = zygote_for(plan.env)
            zygote.fork(request, fds)
    except BaseException:
        ours.close()
        if holder is not None:
            holder_kill(holder)
        raise
    finally:
        theirs.close()
        for fd in namespaces.values():
            os.close(fd)
    return Forked(ours, holder, zygote)


def discard(zygote: Zygote) -> None:
    """Forget `zygote` (the next worker of its environment starts a new one) and close it, at once
    when no request of another worker waits on it, else when the last is answered: closing it
    under a pending request would end that worker before it was made (seen under a full suite's
    load, when a stopped spare's keeper ended without a word and its zygote was taken for dead)."""
    with _registry:
        if _zygotes.get(zygote.key) is zygote:
            del _zygotes[zygote.key]
        zygote.retired = True
        now = zygote.pending <= 0
    if now:
        zygote.close()


def _proc_limits(pid: int) -> str:
    with open(f"/proc/{pid}/limits") as f:
        return f.read()
