"""A real local Ray cluster for the tests (CPUs only, no dashboard, a small object store), and
ways to look at the processes of its workers. Stopped by ending the process that holds it,
never by `ray stop` (which stops every Ray instance of the user on this machine)."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path


HEAD = """
import sys, time, ray
info = ray.init(address="local", num_cpus=int(sys.argv[1]), num_gpus=0, include_dashboard=False, object_store_memory=100_000_000,
                logging_level="ERROR")
print(info.address_info["gcs_address"], flush=True)
sys.stdin.read()  # held until the test closes our stdin (or dies)
"""


class LocalCluster:
    """A head node held by a small Python process (ray.init starts the GCS and the raylet as its
    children and stops them when it exits); drivers join it by address, as on a real cluster."""

    def __init__(self, num_cpus: int = 2, env: dict[str, str] | None = None):
        """`env`: the nodes' own environment, over this process's (their workers inherit it)."""
        env = {**{k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}, **(env or {})}
        self.proc = subprocess.Popen([sys.executable, "-c", HEAD, str(num_cpus)], env=env, stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, start_new_session=True, text=True)
        line = self.proc.stdout.readline().strip()
        if not line:
            self.stop()
            raise RuntimeError("the local Ray cluster did not start")
        self.address = line

    def stop(self) -> None:
        if self.proc.stdin:
            self.proc.stdin.close()
        try:
            self.proc.wait(60)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()


def busy_workers() -> list[int]:
    """Pids of Ray worker processes running a ratchet problem (a slot's actor running one: its
    title is `ray::ProblemSlot.run`)."""
    out = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            title = (entry / "cmdline").read_bytes().split(b"\0")[0]
        except OSError:
            continue
        if title.startswith(b"ray::ProblemSlot.run"):
            out.append(int(entry.name))
    return out


def descendants(pid: int) -> set[int]:
    found, todo = set(), [pid]
    while todo:
        p = todo.pop()
        for task in Path(f"/proc/{p}/task").glob("*"):
            try:
                children = [int(x) for x in (task / "children").read_text().split()]
            except (OSError, ValueError):
                continue
            for child in children:
                if child not in found:
                    found.add(child)
                    todo.append(child)
    return found


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"
