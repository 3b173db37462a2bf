"""`python -m tools.zygote SOCKET_FD`: a process that has imported what every worker needs (torch,
torch._dynamo, Triton, the worker's own modules) once, and forks workers from that state.

A worker made by exec spends seconds importing before it can serve; a fork of this process starts
with all of it in memory. The zygote is trusted and stays clean: it never creates a CUDA context
(a forked child could not use one), never loads a problem or a candidate, holds no secret (it is
started with a worker's own environment, built from an allowlist for candidates), and does
nothing but fork on request. Its one channel is a Unix socket to the evaluator.

A request (one datagram: a JSON header and descriptors) says how to make one worker: its
channels, its log, a socket for its status, the namespaces of the bubblewrap sandbox that holds
them (for a candidate's worker), and what tools/zygote/enter.py applies. For each, the zygote
forks a first child that joins those namespaces and forks the worker, which is then inside the
sandbox's pid namespace. The first child stays outside, as the worker's keeper: it reports the
worker's pid and, when it ends, its wait status on the status socket, and kills the worker's
process group when asked or when the evaluator closes that socket (or dies).
"""
from __future__ import annotations

import base64
import json
import os
import resource
import select
import signal
import socket
import sys
import time
import traceback
from typing import Any

from tools.zygote import enter

PRELOAD = ("torch", "torch._dynamo", "triton", "numpy", "landlock", "tools.worker.__main__", "tools.worker.confine",
           "tools.worker.candidate", "tools.worker.reference", "tools.worker.cuda_build", "tools.wire.cuda_vmm")
MAX_REQUEST_BYTES = 1 << 20
MAX_FDS = 32
ENTER_FAILED = 125  # the worker's exit status when a confinement step did not take
ENDED = 0  # the zygote's own, when the evaluator's end of its socket closed


def main(sock_fd: int) -> None:
    # no parent-death signal: the kernel sends it when the *thread* that started us ends, and an
    # evaluator starts zygotes from short-lived threads. The evaluator's end closing (it exited or
    # died) or a new parent (it died) ends the zygote, and its keepers with it.
    parent = os.getppid()
    started = time.monotonic()
    hosts = enter.own_namespaces()
    with open("/proc/sys/kernel/cap_last_cap") as f:
        last_cap = int(f.read())
    import importlib

    for name in PRELOAD:
        importlib.import_module(name)
    torch = sys.modules["torch"]
    if torch.cuda.is_initialized():  # a fork could not use it, and would share the card's context
        raise RuntimeError("the zygote must not create a CUDA context")
    limits = _limits()
    print(f"zygote {os.getpid()}: imported in {time.monotonic() - started:.2f} s", flush=True)
    sock = socket.socket(fileno=sock_fd)  # requests may have waited here while we imported
    while True:
        readable, _, _ = select.select([sock], [], [], 1.0)
        _reap()
        if os.getppid() != parent:
            return
        if not readable:
            continue
        changed = _restored(limits)  # before the descriptors arrive: a cut open-file limit truncates them
        msg, fds, flags, _ = socket.recv_fds(sock, MAX_REQUEST_BYTES, MAX_FDS)
        if not msg:
            return  # the evaluator closed its end, or died
        try:
            request = json.loads(msg)
        except ValueError:
            request = None
        try:
            if not isinstance(request, dict) or not isinstance(request.get("status"), int):
                raise ValueError("a malformed request")
            if flags & (socket.MSG_CTRUNC | socket.MSG_TRUNC) or len(fds) != request.get("fds"):
                raise ValueError(f"{len(fds)} descriptors arrived of {request.get('fds')} (is the open-file limit cut?)")
            if changed:  # the evaluator starts a new zygote
                raise ValueError(f"this zygote was tampered with: {changed}")
            pid = os.fork()
            if pid == 0:
                sock.close()
                _keeper(request, fds, hosts, last_cap)  # never returns
        except (ValueError, OSError) as exc:  # a request we cannot serve: said on its status socket
            _refuse(request if isinstance(request, dict) else {}, fds, str(exc))
        finally:
            for fd in fds:
                os.close(fd)


def _limits() -> dict[str, tuple[int, int]]:
    return {name: resource.getrlimit(getattr(resource, name)) for name in dir(resource) if name.startswith("RLIMIT_")}


def _restored(limits: dict[str, tuple[int, int]]) -> str:
    """Undo what another process changed in this one since it started, as far as can be seen, and
    say what could not be undone: its resource limits (set back), a tracer. Only a worker of the
    evaluator's own uid could change them (best-effort without bwrap or a uid of its own, where
    workers are not forked at all: tools/sandbox Sandbox.isolates_workers), and forks inherit them."""
    stuck = []
    for name, value in _limits().items():
        if limits.get(name) != value:
            try:
                resource.setrlimit(getattr(resource, name), limits[name])
            except (OSError, ValueError) as exc:
                stuck.append(f"{name} ({exc})")
    with open("/proc/self/status") as f:
        traced = any(line.startswith("TracerPid:") and line.split()[1] != "0" for line in f)
    return ", ".join(stuck + (["a tracer is attached"] if traced else []))


def _reap() -> None:
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return


def _refuse(request: dict[str, Any], fds: list[int], message: str) -> None:
    index = request.get("status")
    if isinstance(index, int) and 0 <= index < len(fds):
        try:
            os.write(fds[index], json.dumps({"error": message}).encode())
        except OSError:
            pass


def _keeper(request: dict[str, Any], fds: list[int], hosts: dict[str, int], last_cap: int) -> None:
    """The first child: join the sandbox, fork the worker, keep it (module docstring)."""
    status = socket.socket(fileno=fds[request["status"]])
    code = 0
    try:
        # no parent-death signal: a zygote closed to make room for another (tools/processes/zygote.py)
        # leaves its workers running; the evaluator's end of `status` closing is what ends a keeper
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        namespaces = {name: fds[i] for name, i in request.get("namespaces", {}).items()}
        enter.join_namespaces(namespaces)
        joined = {name: os.fstat(fd).st_ino for name, fd in namespaces.items()}
        spec = dict(request["spec"])
        spec["seccomp"] = base64.b64decode(spec["seccomp"]) if spec.get("seccomp") else None
        mine = {"worker": [fds[i] for i in request["worker"]], "log": fds[request["log"]], "namespaces": joined}
        pid = os.fork()
        if pid == 0:
            _worker(spec, mine, hosts, last_cap)  # never returns
        for i, fd in enumerate(fds):
            if i != request["status"]:
                os.close(fd)
        _keep(pid, status)
    except BaseException as exc:  # noqa: BLE001 - reported to the evaluator, which fails the spawn
        try:
            status.sendall(json.dumps({"error": f"{type(exc).__name__}: {exc}"}).encode())
        except OSError:
            pass
        code = 1
    os._exit(code)


def _worker(spec: dict[str, Any], fds: dict[str, Any], hosts: dict[str, int], last_cap: int) -> None:
    code = ENTER_FAILED
    log = os.fstat(fds["log"])
    fds["log_id"] = (log.st_dev, log.st_ino)
    try:
        enter.apply(spec, fds, hosts, last_cap)
        code = 0
        from tools.worker import __main__ as worker_main

        sys.argv = [worker_main.__file__, *(str(fd) for fd in enter.WORKER_FDS)]  # as `python -m tools.worker 3 4 5`
        worker_main.serve(*enter.WORKER_FDS)
    except enter.EnterFailed as exc:
        _say(fds, f"sandbox: the worker was not started: {exc}\n")
        code = ENTER_FAILED
    except BaseException as exc:  # noqa: BLE001 - the worker's own failures go to its log, as with exec
        traceback.print_exc()
        if code:  # before it served: said in its log too, whether or not stderr was its log yet
            _say(fds, f"worker start failed: {type(exc).__name__}: {exc}\n")
        code = code or 1
    finally:
        try:
            sys.stdout.flush()
            sys.stderr.flush()
        finally:
            os._exit(code)


def _say(fds: dict[str, Any], text: str) -> None:
    """Write to the worker's log: fd 2 once it is the log, else the log's own descriptor (still
    open until the worker's descriptors are taken, tools/zygote/enter.py)."""
    try:
        err = os.fstat(2)
        fd = 2 if (err.st_dev, err.st_ino) == fds["log_id"] else fds["log"]
        os.write(fd, text.encode(errors="replace"))
    except OSError:
        pass  # nowhere left to say it: the exit status (125) still tells the parent


def _keep(pid: int, status: socket.socket) -> None:
    """Report the worker's pid, then its wait status when it ends; kill its process group when
    asked ("kill") or when the evaluator's end closes. The group is killed before the worker is
    reaped, while its id cannot have been reused."""
    pidfd = os.pidfd_open(pid)
    listening = True
    try:
        status.sendall(json.dumps({"pid": pid}).encode())
    except OSError:  # the evaluator let this request go before it was forked (Forked.wait): none wanted
        _kill_group(pid)
        listening = False
    while True:
        watched: list[Any] = [pidfd, status] if listening else [pidfd]
        readable, _, _ = select.select(watched, [], [])
        if status in readable:
            try:
                data = status.recv(64)
            except OSError:
                data = b""
            if not data:
                listening = False
            _kill_group(pid)
        if pidfd in readable:
            _kill_group(pid)
            _, wait_status = os.waitpid(pid, 0)
            try:
                status.sendall(json.dumps({"exit": wait_status}).encode())
            except OSError:
                pass
            return


def _kill_group(pid: int) -> None:
    try:
        os.killpg(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


if __name__ == "__main__":
    main(int(sys.argv[1]))
    os._exit(ENDED)  # no interpreter teardown (about a second with torch loaded): nothing to flush
