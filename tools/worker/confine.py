"""The confinement a worker applies to itself before any candidate code or thread exists.

Runs first in `python -m tools.worker`, right after the configuration frame is read and before
torch is imported (so the process still has one thread: landlock restricts the calling thread
and the threads and processes it creates later, never the others). What it applies comes from
the trusted parent (tools/sandbox/): resource limits, then a landlock ruleset under which the
process may execute only the profile's toolchain and write only below its scratch, /tmp,
/dev/shm, the device nodes and its own /proc entry. Neither can be undone by the process later.
"""
from __future__ import annotations

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
    for path in writable:
        ruleset.allow(path, rules=changes)
    file_rights = FSAccess.WRITE_FILE | (FSAccess.TRUNCATE if abi >= 3 else 0)
    # its own /proc/<pid> (resolved now, from /proc/self): CUDA names its threads through
    # /proc/self/task/<tid>/comm and fails to start when it cannot
    for path in [*devices, "/proc/self"]:
        ruleset.allow(path, rules=file_rights)
    for path in executable:
        ruleset.allow(path, rules=FSAccess.EXECUTE)
    ruleset.apply()
    return abi
