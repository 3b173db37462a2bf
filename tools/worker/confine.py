"""The confinement a worker applies to itself before any candidate code or thread exists.

Runs first in `python -m tools.worker`, right after the configuration frame is read and before
torch is imported (so the process still has one thread: landlock restricts the calling thread
and the threads and processes it creates later, never the others). What it applies comes from
the trusted parent (tools/sandbox/): resource limits, then a landlock ruleset under which the
process may execute only the profile's toolchain and write only below its scratch, /tmp,
/dev/shm, the device nodes and its own /proc entry, and (landlock ABI 6, Linux 6.12) may signal
only itself and its own children. Neither can be undone by the process later.
"""
from __future__ import annotations

import ctypes
import os
import resource
from typing import Any

RLIMITS = {"nproc": resource.RLIMIT_NPROC, "nofile": resource.RLIMIT_NOFILE}


def apply(spec: dict[str, Any] | None) -> list[str]:
    """Apply `spec` ({"rlimits": {...}, "landlock": {"writable": [...], "executable": [...]}});
    return the mechanisms applied, for the parent to record."""
    applied: list[str] = []
    if not spec:
        return applied
    for name, value in (spec.get("rlimits") or {}).items():
        resource.setrlimit(RLIMITS[name], (int(value), int(value)))
        applied.append(f"rlimit-{name}")
    rules = spec.get("landlock")
    if rules:
        abi = _restrict(rules["writable"], rules["executable"], rules.get("devices", []))
        applied.append(f"landlock-abi{abi}")
        if abi >= 6:
            _scope_signals(rules["writable"])
            applied.append("landlock-signal-scope")
    return applied


def _restrict(writable: list[str], executable: list[str], devices: list[str]) -> int:
    """Only `executable` (files, or directories below which) may be executed; only below
    `writable` may files be created, written, truncated, renamed or removed; `devices` may be
    opened for writing (the NVIDIA device nodes, /dev/null)."""
    from landlock import FSAccess, Ruleset, landlock_abi_version

    abi = landlock_abi_version()
    changes = (FSAccess.WRITE_FILE | FSAccess.REMOVE_DIR | FSAccess.REMOVE_FILE | FSAccess.MAKE_CHAR
               | FSAccess.MAKE_DIR | FSAccess.MAKE_REG | FSAccess.MAKE_SOCK | FSAccess.MAKE_FIFO
               | FSAccess.MAKE_BLOCK | FSAccess.MAKE_SYM)
    if abi >= 2:
        changes |= FSAccess.REFER
    if abi >= 3:
        changes |= FSAccess.TRUNCATE
    ruleset = Ruleset(restrict_rules=changes | FSAccess.EXECUTE)
    # device nodes are made nowhere: a worker left root (best-effort, no uid of its own) could
    # otherwise make one of the host's disk in its scratch and write through it
    for path in writable:
        ruleset.allow(path, rules=changes & ~(FSAccess.MAKE_CHAR | FSAccess.MAKE_BLOCK))
    file_rights = FSAccess.WRITE_FILE | (FSAccess.TRUNCATE if abi >= 3 else 0)
    # its own /proc/<pid> (resolved now, from /proc/self): CUDA names its threads through
    # /proc/self/task/<tid>/comm and fails to start when it cannot
    for path in [*devices, "/proc/self"]:
        ruleset.allow(path, rules=file_rights)
    for path in executable:
        ruleset.allow(path, rules=FSAccess.EXECUTE)
    ruleset.apply()
    return abi


LANDLOCK_SCOPE_SIGNAL = 1 << 1  # linux/landlock.h, ABI 6
LANDLOCK_RULE_PATH_BENEATH = 1
SYS_CREATE_RULESET = 444  # x86-64 and arm64 alike (the unified syscall table)


class _ScopedRulesetAttr(ctypes.Structure):
    """landlock_ruleset_attr with ABI 6's `scoped` field (the package's RulesetAttr lacks it)."""
    _fields_ = [("handled_access_fs", ctypes.c_uint64), ("handled_access_net", ctypes.c_uint64),
                ("scoped", ctypes.c_uint64)]


def _scope_signals(writable: list[str]) -> None:
    """A second landlock layer: signals only to processes of this domain (this process and what
    it starts). Without it, a worker outside bubblewrap's pid namespace (best-effort) could stop
    or kill any process of its uid, or every process when it runs as root: the evaluator, its
    reference worker, a warm pool's workers started for the next problem (tests/
    test_eval_warm_attacks.py). The `landlock` package has no scopes yet (its create_ruleset takes
    only its own attribute): that call is ours, its add_rule and restrict_self wrappers are used.

    Every layer handles REFER (moving a file to another directory) whether it names it or not,
    so this layer, too, must allow it below `writable`, as the first one does: without that rule
    every such rename fails with EXDEV, and Triton's caches (a file written in a temporary
    directory, then renamed into place) could not be filled on a GPU."""
    from landlock import FSAccess
    from landlock.plumbing import PathBeneathAttr, get_add_rule, get_restrict_self

    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall.restype = ctypes.c_long
    attr = _ScopedRulesetAttr(FSAccess.REFER, 0, LANDLOCK_SCOPE_SIGNAL)
    fd = libc.syscall(ctypes.c_long(SYS_CREATE_RULESET), ctypes.byref(attr), ctypes.c_size_t(ctypes.sizeof(attr)),
                      ctypes.c_uint32(0))
    if fd < 0:
        raise OSError(ctypes.get_errno(), "landlock_create_ruleset (signal scope)")
    try:  # the package's wrappers raise its SyscallError, an OSError
        for path in writable:  # each exists: the first layer opened it alike
            parent = os.open(path, os.O_PATH | os.O_CLOEXEC)
            try:
                get_add_rule()(fd, LANDLOCK_RULE_PATH_BENEATH, ctypes.byref(PathBeneathAttr(FSAccess.REFER, parent)), 0)
            finally:
                os.close(parent)
        get_restrict_self()(fd, 0)
    finally:
        os.close(fd)
