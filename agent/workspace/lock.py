"""Crash-safe file primitives for the git workspace: an OS file lock, atomic writes, pid checks.

Nothing here knows about git; `agent.workspace.root` builds its commit protocol on these.
"""
from __future__ import annotations

import errno
import fcntl
import os
import random
import secrets
import time
from pathlib import Path


class LockTimeout(Exception):
    """The lock was still held by another process when the timeout ran out."""

    def __init__(self, path: Path, holder: int | None, waited: float):
        self.path, self.holder, self.waited = path, holder, waited
        who = f"pid {holder}" if holder else "another process"
        super().__init__(f"{path} is held by {who} (waited {waited:.1f} s)")


class FileLock:
    """An exclusive `fcntl.flock` on `path`, taken with a timeout (None: wait forever, 0: fail at once).

    The kernel releases a flock when its holder dies, so a killed writer never leaves it stuck.
    The holder writes its pid into the file, for the message others get while waiting.
    Locks taken through separate FileLock objects exclude each other, in one process too.
    """

    def __init__(self, path: Path, timeout: float | None = None):
        self.path = Path(path)
        self.timeout = timeout
        self._fd: int | None = None

    def acquire(self) -> None:
        if self._fd is not None:
            raise RuntimeError(f"{self.path} is already held by this FileLock")
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        start = time.monotonic()
        try:
            while True:
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    break
                except BlockingIOError:
                    waited = time.monotonic() - start
                    if self.timeout is not None and waited >= self.timeout:
                        raise LockTimeout(self.path, _read_pid(self.path), waited) from None
                    time.sleep(0.005 + random.random() * 0.02)
            os.ftruncate(fd, 0)
            os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        except BaseException:
            os.close(fd)
            raise
        self._fd = fd

    def release(self) -> None:
        if self._fd is not None:
            fd, self._fd = self._fd, None
            fcntl.flock(fd, fcntl.LOCK_UN)
            os.close(fd)

    def __enter__(self) -> "FileLock":
        self.acquire()
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()


def _read_pid(path: Path) -> int | None:
    try:
        return int(path.read_text().strip() or 0) or None
    except (OSError, ValueError):
        return None


def pid_alive(pid: int) -> bool:
    """Whether a process with this pid exists (a zombie counts as alive)."""
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def fsync_dir(path: Path) -> None:
    try:
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError as exc:  # some file systems refuse fsync on directories
        if exc.errno not in (errno.EINVAL, errno.EBADF, errno.ENOTSUP):
            raise
    finally:
        os.close(fd)


def write_durable(path: Path, data: bytes) -> None:
    """Write `data` to a new file at `path` (truncating) and fsync it."""
    with open(path, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())


def atomic_write(path: Path, data: bytes | str, tmp_dir: Path | None = None) -> None:
    """Replace `path` with `data` so that a reader (or a crash) sees the old file or the new one.

    The temporary file lives in `tmp_dir` (same file system as `path`) or beside `path`.
    """
    path = Path(path)
    if isinstance(data, str):
        data = data.encode()
    tmp = Path(tmp_dir or path.parent) / f".{path.name}.tmp-{os.getpid()}-{secrets.token_hex(4)}"
    try:
        write_durable(tmp, data)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    fsync_dir(path.parent)


def wait_gone(path: Path, grace: float) -> bool:
    """Wait until `path` is gone or at least `grace` seconds old; True if it is gone."""
    while path.exists():
        try:
            age = time.time() - path.stat().st_mtime
        except FileNotFoundError:
            return True
        if age >= grace:
            return False
        time.sleep(min(0.05, grace - age + 0.001))
    return True
