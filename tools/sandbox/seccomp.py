"""The system-call filter of a confined worker, compiled to BPF by libseccomp (through the
pyseccomp binding) in the trusted parent and handed to bubblewrap (`--seccomp FD`), which
installs it just before the worker's executable starts.

Two kinds of refusal:
- KILLED: calls no kernel, compiler or Python library needs, only an attack does (reading or
  writing another process, loading kernel code, reopening host files by handle). The process
  dies with SIGSYS, a fact the parent sees from outside: the verdict is `rejected` (rule
  `sandbox-syscall`) even if the candidate cleared every trace inside its process.
- REFUSED (EPERM and friends): calls that a library may try harmlessly (new namespaces, io_uring,
  keyrings, perf counters, internet sockets): they fail and the caller goes on.

Other architectures' system calls (x86 int 0x80, x32) kill the process (libseccomp's default).
"""
from __future__ import annotations

import errno
import functools
import socket
import tempfile

KILLED = (
    "ptrace", "process_vm_readv", "process_vm_writev", "pidfd_getfd", "kcmp",
    "kexec_load", "kexec_file_load", "init_module", "finit_module", "delete_module",
    "open_by_handle_at", "bpf", "iopl", "ioperm", "reboot", "swapon", "swapoff",
)
REFUSED = {
    errno.EPERM: ("mount", "umount2", "pivot_root", "chroot", "setns", "unshare", "move_mount", "open_tree",
                  "fsopen", "fsmount", "fsconfig", "fspick", "mount_setattr", "name_to_handle_at", "keyctl",
                  "add_key", "request_key", "perf_event_open", "userfaultfd", "fanotify_init", "syslog", "acct",
                  "quotactl", "lookup_dcookie", "settimeofday", "clock_settime", "clock_adjtime", "vhangup",
                  "execveat"),
    errno.ENOSYS: ("io_uring_setup", "io_uring_enter", "io_uring_register", "clone3"),  # clone3: glibc falls back to clone
}
# namespace flags of clone(2): refused, so nothing inside can build a namespace of its own
CLONE_NAMESPACES = (0x00020000, 0x02000000, 0x04000000, 0x08000000, 0x10000000, 0x20000000, 0x40000000, 0x00000080)


class SeccompUnavailable(Exception):
    """libseccomp (or its Python binding) is not there."""


@functools.lru_cache(maxsize=1)
def filter_bpf() -> bytes:
    """The filter as a BPF program (the bytes bwrap --seccomp reads)."""
    try:
        import pyseccomp as sc
    except (ImportError, OSError) as exc:  # the binding is missing, or libseccomp.so is
        raise SeccompUnavailable(f"libseccomp is not available ({exc})") from None
    f = sc.SyscallFilter(sc.ALLOW)
    for name in KILLED:
        _add(f, sc.KILL_PROCESS, name)
    for code, names in REFUSED.items():
        for name in names:
            _add(f, sc.ERRNO(code), name)
    for flag in CLONE_NAMESPACES:
        f.add_rule(sc.ERRNO(errno.EPERM), "clone", sc.Arg(0, sc.MASKED_EQ, flag, flag))
    f.add_rule(sc.ERRNO(errno.EAFNOSUPPORT), "socket", sc.Arg(0, sc.NE, socket.AF_UNIX))
    with tempfile.TemporaryFile() as out:
        f.export_bpf(out)
        out.seek(0)
        return out.read()


def _add(f, action: int, name: str) -> None:
    try:
        f.add_rule(action, name)
    except OSError:  # a call this kernel/libseccomp does not know: nothing to filter
        pass
