"""A bubblewrap sandbox held open for one worker to be forked into (parent side).

bwrap builds the worker's sandbox exactly as for an exec'd worker (tools/sandbox/bwrap.py), with a
holder as its command: pid 1 of the new pid namespace, a Python that says "ready" once the view
is built and then waits on its stdin. `hold` starts it and returns descriptors of its namespaces,
each checked to be new (and to belong to bwrap's own child, alive while they were opened);
tools/processes/zygote.py hands them to the zygote, whose fork joins them. Killing bwrap's
process group ends the sandbox and everything in it.
"""
from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import time

from tools.processes.launcher import die_with_parent, start_child

HOLDER_TIMEOUT_S = 60.0
HOLDER_ENV = {"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8"}  # bwrap and its holder need nothing of ours
NAMESPACES = ("user", "mnt", "net", "ipc", "uts", "cgroup", "pid")
REQUIRED = ("mnt", "net", "ipc", "uts", "pid")


class HolderFailed(Exception):
    """The sandbox could not be held, or is not what it must be; str() is one line."""


def hold(argv: list[str], log_fd: int) -> tuple[subprocess.Popen | None, dict[str, int], int | None]:
    """Start bwrap holding a fresh sandbox; return it, descriptors of its namespaces (each checked
    to be new), or its exit status when it could not build one (bwrap said why in the log)."""
    info_r, info_w = os.pipe()
    try:
        # its parent-death signal follows the thread that starts it: one that lasts (tools/processes/launcher.py)
        holder = start_child(lambda: subprocess.Popen(
            [argv[0], "--info-fd", str(info_w), *argv[1:]], pass_fds=(info_w,), stdin=subprocess.PIPE,
            stdout=subprocess.PIPE, stderr=log_fd, env=HOLDER_ENV, start_new_session=True, preexec_fn=die_with_parent))
    finally:
        os.close(info_w)
    try:
        info = _read_all(info_r, HOLDER_TIMEOUT_S)
    finally:
        os.close(info_r)
    assert holder.stdout is not None
    said = info and select.select([holder.stdout], [], [], HOLDER_TIMEOUT_S)[0]
    line = holder.stdout.readline() if said else b""  # the holder runs: the sandbox is built
    if line != b"ready\n":
        kill(holder)
        code = holder.returncode
        return None, {}, code or 1
    init = int(json.loads(info)["child-pid"])
    return holder, _namespaces_of(init, holder), None


def _read_all(fd: int, timeout: float) -> bytes:
    data, deadline = b"", time.monotonic() + timeout
    while time.monotonic() < deadline and select.select([fd], [], [], deadline - time.monotonic())[0]:
        chunk = os.read(fd, 4096)
        if not chunk:
            break
        data += chunk
    return data


def _namespaces_of(init: int, holder: subprocess.Popen) -> dict[str, int]:
    """Descriptors of the namespaces of the sandbox's first process `init` (bwrap's child, the
    holder): only those that differ from ours, which must include REQUIRED; checked to belong to
    that very process (its parent is our bwrap, and it was alive after they were opened)."""
    try:
        pidfd = os.pidfd_open(init)
    except ProcessLookupError:
        kill(holder)
        raise HolderFailed("the sandbox's first process ended before its namespaces were opened") from None
    fds: dict[str, int] = {}
    try:
        with open(f"/proc/{init}/stat") as f:
            parent = int(f.read().rsplit(")", 1)[1].split()[1])
        if parent != holder.pid:
            raise HolderFailed(f"the sandbox's first process {init} is not bwrap's child")
        for name in NAMESPACES:
            path = f"/proc/{init}/ns/{name}"
            if not os.path.exists(path):
                continue
            fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
            if os.fstat(fd).st_ino == os.stat(f"/proc/self/ns/{name}").st_ino:
                os.close(fd)
                continue
            fds[name] = fd
        if select.select([pidfd], [], [], 0)[0]:
            raise HolderFailed("the sandbox ended while its namespaces were opened")
        missing = [name for name in REQUIRED if name not in fds]
        if missing:
            raise HolderFailed(f"bwrap made no new {', '.join(missing)} namespace")
    except BaseException:
        for fd in fds.values():
            os.close(fd)
        kill(holder)
        raise
    finally:
        os.close(pidfd)
    return fds


def kill(holder: subprocess.Popen, wait: bool = True) -> None:
    """SIGKILL bwrap's process group (bwrap, with --die-with-parent, takes its sandbox along);
    only while it is unreaped, so that the group's id cannot belong to anyone else."""
    if holder.poll() is None:
        try:
            os.killpg(holder.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    if wait:
        holder.wait()
