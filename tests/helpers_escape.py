"""What the sandbox's attack tests check after each attack: nothing escaped.

- no file named after the test's marker appeared on the host (in /tmp, $HOME, the project, the
  evaluator's cache);
- no process survived: none named after the marker, none running as a sandbox uid (a root
  evaluator's workers), no bwrap left below this test process;
- the evaluator's shared caches are unchanged, except for build products published for the
  attacking source itself (its own namespaces, tools/processes/artifacts.py).
"""
from __future__ import annotations

import os
import secrets
import time
from pathlib import Path

from tools.sandbox import UID_BASE

PROJECT = Path(__file__).resolve().parent.parent


def marker() -> str:
    return f"ratchetescape{secrets.token_hex(4)}"


def files_named(token: str, roots: list[tuple[Path, int]]) -> list[Path]:
    """Files and directories whose name holds `token`, below each (root, depth) (-1: any depth)."""
    found: list[Path] = []
    for root, depth in roots:
        if not root.exists():
            continue
        for dirpath, dirnames, filenames in os.walk(root):
            level = len(Path(dirpath).relative_to(root).parts)
            dirnames[:] = [d for d in dirnames if d not in (".git", ".whl", ".device") and (depth < 0 or level + 1 < depth)]
            found += [Path(dirpath) / n for n in dirnames + filenames if token in n]
    return found


def processes() -> list[dict[str, str]]:
    out = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            status = Path(f"/proc/{pid}/status").read_text()
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        fields = dict(line.split(":\t", 1) for line in status.splitlines() if ":\t" in line)
        out.append({"pid": pid, "name": fields.get("Name", ""), "uid": fields.get("Uid", "0").split()[0],
                    "ppid": fields.get("PPid", ""), "cmdline": cmdline})
    return out


def survivors(token: str) -> list[dict[str, str]]:
    """Processes named after the token (a process name holds its first 15 characters), workers of
    this process's evaluators running as their sandbox uids (tools/sandbox: UID_BASE + (pid % 20000) * 100 + n), bwraps started by it."""
    me = str(os.getpid())
    ours = range(UID_BASE + (os.getpid() % 20_000) * 100, UID_BASE + (os.getpid() % 20_000) * 100 + 100)
    return [p for p in processes()
            if token[:15] in p["name"] or token in p["cmdline"] or int(p["uid"]) in ours
            or (p["ppid"] == me and p["name"] == "bwrap")]


def wait_for_no_survivors(token: str, seconds: float = 15.0) -> list[dict[str, str]]:
    deadline = time.monotonic() + seconds
    left = survivors(token)
    while left and time.monotonic() < deadline:
        time.sleep(0.2)
        left = survivors(token)
    return left


def cache_state(cache_dir: Path) -> dict[str, tuple[int, float]]:
    state = {}
    for p in cache_dir.rglob("*"):
        if p.is_file():
            st = p.stat()
            state[str(p.relative_to(cache_dir))] = (st.st_size, st.st_mtime)
    return state


def cache_changes(before: dict[str, tuple[int, float]], after: dict[str, tuple[int, float]]) -> list[str]:
    """Files changed or removed, and files added outside a newly published artifact namespace."""
    new_spaces = {k.split("/")[1] for k in after if k.startswith("artifacts/") and k not in before}
    old_spaces = {k.split("/")[1] for k in before if k.startswith("artifacts/")}
    changed = [k for k, v in before.items() if after.get(k) != v and not k.endswith("/.complete")]
    added = [k for k in after if k not in before and not (k.startswith("artifacts/") and k.split("/")[1] in new_spaces - old_spaces)]
    return changed + added
