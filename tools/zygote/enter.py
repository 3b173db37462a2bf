"""How a fork of the zygote becomes a confined worker: everything bubblewrap and setpriv did for a
worker started by exec, done by the new process to itself, in the same order, before any worker
code runs (then tools/worker/__main__.py applies landlock and the limits, as for every worker).

The forked process (trusted code still: nothing of the candidate exists yet) joins the namespaces
of a bubblewrap sandbox that holds them (the parent started it for this worker alone), forks once
more to be inside its pid namespace, and then, in the new process: becomes a session leader with
the worker's descriptors at fixed numbers and nothing else open, takes the worker's environment,
limits and directory, drops to the worker's own uid with no capabilities (bounding and ambient
sets included) and `no_new_privs`, and loads the system-call filter. Each step that should hold
is checked afterwards, from the kernel's own account (/proc/self/status, /proc/self/ns): a step
that did not take stops the worker before it serves anything (fail closed).
"""
from __future__ import annotations

import ctypes
import os
import resource
import sys
from typing import Any

# namespaces in the order they are joined: the user namespace first (joining it gives the
# capabilities the others need when the evaluator is not root), the pid namespace last (it
# applies to the next fork only)
CLONE_FLAGS = {"user": 0x10000000, "mnt": 0x00020000, "net": 0x40000000, "ipc": 0x08000000,
               "uts": 0x04000000, "cgroup": 0x02000000, "pid": 0x20000000}
REQUIRED_NAMESPACES = ("mnt", "net", "ipc", "uts", "pid")  # a sandboxed worker has all of these of its own
PR_SET_PDEATHSIG, PR_CAPBSET_DROP, PR_SET_SECCOMP, PR_SET_NO_NEW_PRIVS, PR_CAP_AMBIENT = 1, 24, 22, 38, 47
PR_CAP_AMBIENT_CLEAR_ALL, SECCOMP_MODE_FILTER = 4, 2
LINUX_CAPABILITY_VERSION_3 = 0x20080522
RLIMITS = {"core": resource.RLIMIT_CORE, "as": resource.RLIMIT_AS, "cpu": resource.RLIMIT_CPU,
           "fsize": resource.RLIMIT_FSIZE}
WORKER_FDS = (3, 4, 5)  # requests, replies, device memory: `python -m tools.worker 3 4 5`

_libc = ctypes.CDLL(None, use_errno=True)


class EnterFailed(Exception):
    """A confinement step did not take; str() says which (the worker never serves)."""


def _check(result: int, what: str) -> None:
    if result != 0:
        err = ctypes.get_errno()
        raise EnterFailed(f"{what}: {os.strerror(err)}")


def join_namespaces(ns_fds: dict[str, int]) -> None:
    """setns() into each namespace of `ns_fds` (name -> descriptor of /proc/<holder>/ns/<name>)."""
    unknown = set(ns_fds) - set(CLONE_FLAGS)
    if unknown:
        raise EnterFailed(f"unknown namespaces {sorted(unknown)}")
    for name, flag in CLONE_FLAGS.items():
        if name in ns_fds:
            _check(_libc.setns(ns_fds[name], flag), f"setns({name})")


def own_namespaces() -> dict[str, int]:
    """This process's namespaces, by name: their inode numbers."""
    return {name: os.stat(f"/proc/self/ns/{name}").st_ino for name in CLONE_FLAGS
            if os.path.exists(f"/proc/self/ns/{name}")}


def check_namespaces(expected: dict[str, int], hosts: dict[str, int]) -> None:
    """That this process is in each namespace it was sent to, and that none of them is the host's
    (the zygote's own): a pid namespace is joined only by a fork, a mount namespace brings its own
    root; a step that silently did nothing would leave the worker on the host."""
    missing = [name for name in REQUIRED_NAMESPACES if name not in expected]
    if missing:
        raise EnterFailed(f"no namespace of its own for {', '.join(missing)}")
    here = own_namespaces()
    for name, inode in expected.items():
        if here.get(name) != inode:
            raise EnterFailed(f"not in the sandbox's {name} namespace")
        if hosts.get(name) == inode:
            raise EnterFailed(f"the sandbox's {name} namespace is the host's")


def take_descriptors(worker_fds: list[int], log_fd: int) -> None:
    """stdin from /dev/null, stdout and stderr into the worker's log, the worker's channels at
    3, 4, 5, and no other descriptor open (the zygote's socket, the namespaces, anything inherited)."""
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.dup2(log_fd, 1)
    os.dup2(log_fd, 2)
    high = [os.dup(fd) for fd in worker_fds]  # above 5 first: a source may sit at 3, 4 or 5
    for fd, target in zip(high, WORKER_FDS):
        os.dup2(fd, target)  # dup2 clears close-on-exec
    keep = {0, 1, 2, *WORKER_FDS}
    for name in os.listdir("/proc/self/fd"):
        fd = int(name)
        if fd not in keep:
            try:
                os.close(fd)
            except OSError:  # the directory's own descriptor, closed by now
                pass


def take_environment(env: dict[str, str], cwd: str) -> None:
    """The worker's environment replaces the zygote's (os.environ writes through to the C
    environment), and what Python read of it at start is set again."""
    os.chdir(cwd)
    os.environ.clear()
    os.environ.update(env)
    sys.pycache_prefix = env.get("PYTHONPYCACHEPREFIX") or None
    sys.dont_write_bytecode = bool(env.get("PYTHONDONTWRITEBYTECODE"))
    import tempfile

    tempfile.tempdir = None  # computed again from this TMPDIR
    numpy_random = sys.modules.get("numpy.random")
    if numpy_random is not None:  # a fresh process seeds it from the OS; siblings must not share it
        numpy_random.seed()


def set_limits(limits: dict[str, Any]) -> None:
    """`limits`: name -> (soft, hard), names of RLIMITS."""
    for name, (soft, hard) in limits.items():
        resource.setrlimit(RLIMITS[name], (int(soft), int(hard)))


def drop_privileges(uid: int | None, last_cap: int) -> None:
    """As `setpriv --reuid --regid --clear-groups --inh-caps=-all --bounding-set=-all
    --no-new-privs` did: no capability in any set, no supplementary groups, and, when `uid` is
    given (the evaluator is root), that uid and gid."""
    if _status("CapEff") != 0:  # there is something to drop (root, or any uid inside a user namespace)
        for cap in range(last_cap + 1):
            _check(_libc.prctl(PR_CAPBSET_DROP, cap, 0, 0, 0), f"dropping capability {cap} from the bounding set")
        if uid is not None:
            os.setgroups([])
            os.setresgid(uid, uid, uid)
            os.setresuid(uid, uid, uid)
        _check(_libc.prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0), "clearing ambient capabilities")
        header = (ctypes.c_uint32 * 2)(LINUX_CAPABILITY_VERSION_3, 0)
        data = (ctypes.c_uint32 * 6)()  # two empty __user_cap_data_struct
        _check(_libc.capset(header, data), "capset")
    _check(_libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), "no_new_privs")
    for field in ("CapInh", "CapPrm", "CapEff", "CapAmb"):
        if _status(field) != 0:
            raise EnterFailed(f"{field} is not empty after dropping privileges")
    if _status("CapBnd") != 0 and _status("NoNewPrivs") != 1:
        raise EnterFailed("capabilities could still be gained by exec")
    if uid is not None and (os.getresuid() != (uid, uid, uid) or os.getresgid() != (uid, uid, uid) or os.getgroups()):
        raise EnterFailed(f"not running as uid {uid} alone")


def load_filter(bpf: bytes) -> None:
    """Install the system-call filter (classic BPF from libseccomp, the program bwrap --seccomp
    took); no_new_privs is already set."""
    if not bpf or len(bpf) % 8:
        raise EnterFailed("the system-call filter is not a BPF program")

    class Program(ctypes.Structure):
        _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]

    code = ctypes.create_string_buffer(bpf, len(bpf))
    program = Program(len(bpf) // 8, ctypes.cast(code, ctypes.c_void_p))
    _check(_libc.prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, ctypes.byref(program), 0, 0), "loading the seccomp filter")
    if _status("Seccomp") != SECCOMP_MODE_FILTER:
        raise EnterFailed("the system-call filter is not in force")


def die_with_parent() -> None:
    _check(_libc.prctl(PR_SET_PDEATHSIG, 9, 0, 0, 0), "PR_SET_PDEATHSIG")


def _status(field: str) -> int:
    """A field of /proc/self/status: capability sets as numbers (hex there), others as written."""
    with open("/proc/self/status") as f:
        for line in f:
            name, _, value = line.partition(":")
            if name == field:
                value = value.strip()
                return int(value, 16) if field.startswith("Cap") else int(value)
    raise EnterFailed(f"/proc/self/status has no {field}")


def apply(spec: dict[str, Any], fds: dict[str, Any], hosts: dict[str, int], last_cap: int) -> None:
    """Everything above for one worker, in order, in the process that will run it (already in its
    pid namespace). `spec`: env, cwd, limits, and for a candidate's worker (`confined`) uid,
    seccomp (bytes or None) and `sandboxed` (in a bubblewrap sandbox's namespaces); `fds`: the
    worker's channels, its log, and the inodes of the namespaces joined (for the check). The
    reference worker (the user's own code) gets the session, descriptors, environment and limits
    only, as a plain exec gave it."""
    os.setsid()
    take_descriptors(fds["worker"], fds["log"])
    take_environment(spec["env"], spec["cwd"])
    set_limits(spec.get("limits") or {})
    if spec.get("confined"):
        if spec.get("sandboxed"):
            check_namespaces(fds["namespaces"], hosts)
        if spec.get("sandboxed") or spec.get("uid") is not None or os.geteuid() != 0:
            drop_privileges(spec.get("uid"), last_cap)
        if spec.get("seccomp"):
            load_filter(spec["seccomp"])
    die_with_parent()  # after the uid changed: a change of credentials clears it
