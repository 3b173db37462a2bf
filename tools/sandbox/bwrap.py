"""The bubblewrap command line that starts one confined worker.

bwrap (the distribution's package, https://github.com/containers/bubblewrap) builds the
worker's world from nothing: an empty root, the read-only directories of tools/sandbox/paths.py,
a fresh /proc for a new pid namespace (no other process is visible or signalable), a minimal
/dev plus the NVIDIA device nodes for a GPU worker, size-capped tmpfs mounts for /tmp (where the
scratch directory lives), /dev/shm, and no network interface but loopback (new network, IPC,
UTS and cgroup namespaces). Every capability is dropped, the worker gets a session of its own,
and it is killed when bwrap or the evaluator dies, taking the whole pid namespace with it.

Run by root, bwrap sets the namespaces up itself and `setpriv` (util-linux) then drops the
worker to an unprivileged uid of its own with no capabilities and no_new_privs (as root, the
kernel would ignore the process limit and DAC would protect nothing). Run by anyone else,
bwrap makes a user namespace and the worker keeps the user's uid, without capabilities.
"""
from __future__ import annotations

import os
import shlex
import shutil
import sys
from dataclasses import dataclass, field
from pathlib import Path

from tools.sandbox import paths

NVIDIA_DEVICES = ("nvidiactl", "nvidia-uvm", "nvidia-uvm-tools", "nvidia-modeset")


@dataclass
class Spec:
    scratch: Path
    gpu: bool  # bind the NVIDIA device nodes
    tmp_bytes: int  # size cap of /tmp (which holds the scratch directory) and of /dev/shm
    uid: int | None = None  # root only: the unprivileged uid (and gid) the worker runs as
    seccomp_fd: int | None = None
    extra_readable: list[Path] = field(default_factory=list)


# the command of a sandbox that only holds namespaces for a worker forked into them
# (tools/processes/zygote.py): it says it runs (the sandbox is built), then waits until its stdin closes
HOLDER_COMMAND = [sys.executable, "-S", "-I", "-c",
                  "import sys; sys.stdout.write('ready\\n'); sys.stdout.flush(); sys.stdin.read()"]


def argv(bwrap: str, spec: Spec, command: list[str], *, holder: bool = False) -> list[str]:
    """bwrap's command line; `holder`: the command holds the sandbox for a worker forked into it
    (HOLDER_COMMAND): it is the pid namespace's first process (no reaper of bwrap's beside it, so
    the worker sees no process but that one and itself, as an exec'd worker saw only bwrap's
    reaper), and with spec.uid set it stays root without capabilities rather than going through
    setpriv: the worker drops to spec.uid itself (tools/zygote/enter.py)."""
    a = [bwrap, "--unshare-pid", "--unshare-net", "--unshare-ipc", "--unshare-uts", "--unshare-cgroup-try",
         "--die-with-parent", "--new-session", "--cap-drop", "ALL"]
    drop_uid = not holder
    if holder:
        a += ["--as-pid-1"]
    if spec.uid is not None and drop_uid:  # bwrap runs as root: keep just what setpriv needs to drop to spec.uid
        a += ["--cap-add", "CAP_SETUID", "--cap-add", "CAP_SETGID", "--cap-add", "CAP_SETPCAP"]
    elif spec.uid is None:
        a += ["--unshare-user"]
    a += _system()
    # /tmp first: the scratch directory and any readable directory under /tmp go inside it
    a += ["--size", str(spec.tmp_bytes), "--tmpfs", "/tmp", "--chmod", "1777", "/tmp"]
    created: set[str] = {"/", "/tmp"}
    for d in paths.readable_dirs(spec.extra_readable):
        a += _ancestors(d, created) + ["--ro-bind", str(d), str(d)]
    a += ["--proc", "/proc", "--dev", "/dev", "--ro-bind", "/sys", "/sys"]
    a += ["--size", str(spec.tmp_bytes), "--tmpfs", "/dev/shm", "--chmod", "1777", "/dev/shm"]
    if spec.gpu:
        for dev in gpu_devices():
            a += ["--dev-bind", dev, dev]
    scratch = str(spec.scratch)
    if not scratch.startswith("/tmp/"):
        a += _ancestors(spec.scratch.parent, created) + ["--size", str(spec.tmp_bytes), "--tmpfs", scratch]
    else:
        a += ["--dir", scratch]
    a += ["--chmod", "0777", scratch, "--chdir", scratch]
    if spec.seccomp_fd is not None:
        a += ["--seccomp", str(spec.seccomp_fd)]
    a.append("--")
    if spec.uid is not None and drop_uid:
        a += [_setpriv(), f"--reuid={spec.uid}", f"--regid={spec.uid}", "--clear-groups", "--inh-caps=-all",
              "--bounding-set=-all", "--no-new-privs"]
    return a + command


def _setpriv() -> str:
    """setpriv's real path as the host finds it (the system's directories are in the sandbox's view;
    the parent's PATH may name others that are not), or the bare name."""
    found = shutil.which("setpriv")
    return str(Path(found).resolve()) if found else "setpriv"


def _system() -> list[str]:
    a: list[str] = []
    for name in paths.SYSTEM_DIRS:
        host = Path("/") / name
        if host.is_symlink():
            a += ["--symlink", os.readlink(host), str(host)]
        elif host.is_dir():
            a += ["--ro-bind", str(host), str(host)]
    a += ["--dir", "/etc"]
    for name in paths.ETC_ENTRIES:
        a += ["--ro-bind-try", f"/etc/{name}", f"/etc/{name}"]
    return a


def _ancestors(path: Path, created: set[str]) -> list[str]:
    """Create the directories leading to a bind target, world-traversable (bwrap would make
    them 0700 for root, which an unprivileged worker cannot cross)."""
    a: list[str] = []
    for parent in reversed(path.parents):
        p = str(parent)
        if p not in created and not any(p.startswith(f"/{s}/") or p == f"/{s}" for s in paths.SYSTEM_DIRS):
            created.add(p)
            a += ["--dir", p, "--chmod", "0755", p]
    return a


def gpu_devices() -> list[str]:
    dev = Path("/dev")
    found = [str(p) for p in sorted(dev.glob("nvidia[0-9]*"))]
    found += [str(dev / n) for n in NVIDIA_DEVICES if (dev / n).exists()]
    if (dev / "nvidia-caps").is_dir():
        found.append(str(dev / "nvidia-caps"))
    return found


def describe(a: list[str]) -> str:
    """The command as a shell line (for logs and error messages)."""
    return " ".join(shlex.quote(x) for x in a)


def python_command(fds: tuple[int, ...]) -> list[str]:
    """`python -m tools.worker REQUESTS REPLIES MEMORY`: two pipes and the socket for memory handles."""
    return [sys.executable, "-m", "tools.worker", *(str(fd) for fd in fds)]
