"""Real local Ray clusters for the tests (CPUs only, no dashboard, a small object store), and
ways to look at the processes of its workers. `LocalCluster` is joined by its GCS address;
`ClientCluster` also serves Ray Client (`ray://`), as a cluster reached from outside does. Each
is stopped by ending the processes it started, never by `ray stop` (which stops every Ray
instance of the user on this machine, other people's test clusters included)."""
from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path


HEAD = """
import sys, time, ray
info = ray.init(address="local", num_cpus=int(sys.argv[1]), num_gpus=int(sys.argv[2]), include_dashboard=False,
                object_store_memory=100_000_000,
                logging_level="ERROR")
print(info.address_info["gcs_address"], flush=True)
sys.stdin.read()  # held until the test closes our stdin (or dies)
"""


class LocalCluster:
    """A head node held by a small Python process (ray.init starts the GCS and the raylet as its
    children and stops them when it exits); drivers join it by address, as on a real cluster."""

    def __init__(self, num_cpus: int = 2, env: dict[str, str] | None = None, num_gpus: int = 0):
        """`env`: the nodes' own environment, over this process's (their workers inherit it);
        `num_gpus`: the GPUs the node offers (0: none, whatever the host has)."""
        env = {**{k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}, **(env or {})}
        self.proc = subprocess.Popen([sys.executable, "-c", HEAD, str(num_cpus), str(num_gpus)], env=env, stdin=subprocess.PIPE,
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


class ClientCluster:
    """A head started by `ray start --head --block` with a Ray Client server; drivers connect to
    `address` (`ray://127.0.0.1:PORT`) from outside the cluster, through Ray Client.

    Every port is a free one of this host (the defaults, 6379, 10001, 52365..., would meet any
    other cluster here), and the head has its own temp dir, so it neither writes /tmp/ray's
    `ray_current_cluster` (what `--ray auto` and `ray.init()` find) nor reads another's. `ray start`
    runs in a session of its own, which every process of the cluster stays in (its Ray workers
    too, though each has a process group of its own): `stop()` kills that session's processes."""

    def __init__(self, num_cpus: int = 2, env: dict[str, str] | None = None, start_s: float = 120.0):
        """`env`: the nodes' own environment, over this process's (their workers inherit it)."""
        env = {**{k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}, **(env or {})}
        gcs, client, *agent = free_ports(6)
        # short: Ray's Unix socket paths under it must fit in 107 bytes
        self.temp_dir = Path(tempfile.mkdtemp(prefix="ray-", dir="/tmp"))
        self.output = self.temp_dir / "ray-start.out"
        command = [sys.executable, "-c", "from ray.scripts.scripts import main; main()", "start", "--head", "--block",
                   f"--port={gcs}", f"--ray-client-server-port={client}",
                   f"--num-cpus={num_cpus}", "--num-gpus=0", "--include-dashboard=false",
                   "--object-store-memory=100000000", "--disable-usage-stats", f"--temp-dir={self.temp_dir}",
                   f"--dashboard-agent-listen-port={agent[0]}", f"--dashboard-agent-grpc-port={agent[1]}",
                   f"--runtime-env-agent-port={agent[2]}", f"--metrics-export-port={agent[3]}"]
        with open(self.output, "wb") as out:
            self.proc = subprocess.Popen(command, env=env, stdin=subprocess.DEVNULL, stdout=out,
                                         stderr=subprocess.STDOUT, start_new_session=True)
        self.address = f"ray://127.0.0.1:{client}"
        deadline = time.monotonic() + start_s
        # up once the client server takes connections and the runtime-env agent (which every client
        # connection's server asks for the driver's runtime_env, with only ~30 s of retries) listens
        while not (_accepts(client) and _listens(agent[2])):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                tail = self.output.read_text(errors="replace")[-2000:]
                self.stop()
                raise RuntimeError(f"the Ray head with a client server did not start:\n{tail}")
            time.sleep(0.2)

    def logs(self, limit: int = 3000) -> str:
        """The tail of the head's Ray Client server logs (the proxy's and each connection's), to read
        beside a failure: a driver is told only "Initialization failure from server"."""
        out = []
        for path in sorted(self.temp_dir.glob("session_*/logs/ray_client_server*")):
            text = path.read_text(errors="replace").strip()
            if text:
                out.append(f"--- {path.name}\n{text[-limit:]}")
        return "\n".join(out) or "(no Ray Client server log)"

    def processes(self) -> list[int]:
        """The live processes of the cluster: those of the `ray start` process's session."""
        return [pid for pid in _pids() if _session_of(pid) == self.proc.pid and alive(pid)]

    def stop(self) -> None:
        """Kill every process of the cluster (SIGKILL: nothing of it needs to outlive the test) and remove its
        temp dir."""
        deadline = time.monotonic() + 30
        while True:
            left = self.processes()
            if not left:
                break
            if time.monotonic() > deadline:
                raise RuntimeError(f"the Ray head's processes {left} outlived SIGKILL")
            for pid in left:
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass  # gone between the scan and the kill
            time.sleep(0.2)
        self.proc.wait()
        shutil.rmtree(self.temp_dir)


def free_ports(n: int) -> list[int]:
    """n distinct TCP ports of 127.0.0.1 that nothing listens on (held open together, so distinct)."""
    held = []
    try:
        for _ in range(n):
            s = socket.socket()
            s.bind(("127.0.0.1", 0))
            held.append(s)
        return [s.getsockname()[1] for s in held]
    finally:
        for s in held:
            s.close()


def _accepts(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=1).close()
    except OSError:
        return False
    return True


def _listens(port: int) -> bool:
    """Whether something on this host listens on TCP `port`, on any address (Ray's agents bind the
    node's IP, which need not be 127.0.0.1)."""
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            rows = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for row in rows:
            fields = row.split()
            if int(fields[1].rsplit(":", 1)[1], 16) == port and fields[3] == "0A":  # 0A: LISTEN
                return True
    return False


def _pids() -> list[int]:
    return [int(entry.name) for entry in Path("/proc").iterdir() if entry.name.isdigit()]


def _session_of(pid: int) -> int | None:
    try:
        return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[3])
    except (OSError, IndexError, ValueError):
        return None


def busy_workers(session: int) -> list[int]:
    """Pids of Ray worker processes of one cluster running a ratchet problem (a slot's actor running
    one: its title is `ray::ProblemSlot.run`). `session`: the cluster's session (its head process's
    pid: every process of the cluster stays in it), so another test's cluster on this host is not seen."""
    out = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            title = (entry / "cmdline").read_bytes().split(b"\0")[0]
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        # stat: pid (comm) state ppid pgrp session ...; comm may hold spaces, so split after its ')'
        fields = stat[stat.rfind(")") + 2:].split()
        if title.startswith(b"ray::ProblemSlot.run") and len(fields) > 3 and int(fields[3]) == session:
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
