"""Workers forked from a zygote (tools/zygote/, tools/processes/zygote.py) are confined exactly as
exec'd ones were: read from outside, from the kernel's own account (/proc), not from what the
worker says. And the start fails closed: a sandbox that was not built, or a namespace that is the
host's, never gets a worker."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from helpers_eval import PROBLEMS, assert_ok, options, source
from tools.evaluate import Evaluator
from tools.options import EvalOptions, resolved
from tools.processes import zygote
from tools.processes.process import WorkerProcess
from tools.processes.proctree import children as _children
from tools.processes.spawner import Spawner
from tools.sandbox import UID_BASE, Fork, Launch, bwrap
from tools.sandbox.probe import probe
from tools.zygote import enter

pytestmark = pytest.mark.skipif(not probe().bwrap, reason="needs bubblewrap")
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def spawner():
    sp = Spawner(resolved(EvalOptions(device="cpu")))
    yield sp
    sp.close()


def status(pid: int) -> dict[str, str]:
    with open(f"/proc/{pid}/status") as f:
        return dict(line.rstrip("\n").split(":\t", 1) for line in f if ":\t" in line)


def namespaces(pid: int | str) -> dict[str, str]:
    return {n: os.readlink(f"/proc/{pid}/ns/{n}") for n in ("mnt", "pid", "net", "ipc", "uts")}


def gone(pid: int, within: float = 10.0) -> bool:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        try:
            with open(f"/proc/{pid}/stat") as f:
                if f.read().rsplit(")", 1)[1].split()[0] == "Z":
                    return True
        except FileNotFoundError:
            return True
        time.sleep(0.05)
    return False


def descendants(pid: int) -> list[int]:
    found, todo = [], [pid]
    while todo:
        for child in _children(todo.pop()):
            found.append(child)
            todo.append(child)
    return found


def started(spawner: Spawner) -> WorkerProcess:
    worker = spawner.spawn("candidate")
    assert worker.wait_ready(120)["op"] == "ready"
    assert isinstance(worker.proc, zygote.Forked)
    return worker


def test_a_forked_worker_is_confined_as_an_execd_one(spawner):
    worker = started(spawner)
    try:
        st = status(worker.pid)
        for field in ("CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb"):
            assert int(st[field], 16) == 0, field
        assert st["NoNewPrivs"] == "1" and st["Seccomp"] == "2"
        if os.geteuid() == 0:
            uids = {int(u) for u in st["Uid"].split()} | {int(g) for g in st["Gid"].split()}
            assert len(uids) == 1 and uids.pop() >= UID_BASE
            assert st["Groups"].strip() == ""
        assert st["NSpid"].split()[-1] == "2"  # inside its own pid namespace, beside the holder (1)
        ours, its = namespaces("self"), namespaces(worker.pid)
        assert all(ours[n] != its[n] for n in ours), its
        # nothing of the zygote's or the parent's is open in it: its log, /dev/null, its three channels
        links = {int(fd): os.readlink(f"/proc/{worker.pid}/fd/{fd}") for fd in os.listdir(f"/proc/{worker.pid}/fd")}
        assert links[0] == "/dev/null" and links[1] == links[2] == str(worker.log)
        assert links[3].startswith("pipe:") and links[4].startswith("pipe:") and links[5].startswith("socket:")
        # what it opened itself since (landlock's ruleset; on a GPU the driver's files, eventfds and
        # pipes) but no socket (the zygote's) and no namespace (the sandbox's holder's)
        others = {fd: link for fd, link in links.items() if fd > 5}
        assert not any(link.startswith(("socket:", "mnt:", "pid:", "net:", "ipc:", "uts:", "user:", "cgroup:"))
                       for link in others.values()), others
    finally:
        worker.close()


def test_two_workers_share_no_namespace_uid_or_scratch(spawner):
    a, b = started(spawner), started(spawner)
    try:
        assert all(x != y for x, y in zip(namespaces(a.pid).values(), namespaces(b.pid).values()))
        if os.geteuid() == 0:
            assert status(a.pid)["Uid"] != status(b.pid)["Uid"]
        assert os.readlink(f"/proc/{a.pid}/root") == os.readlink(f"/proc/{b.pid}/root") == "/"  # each its own view
        assert os.stat(f"/proc/{a.pid}/root/tmp").st_dev != os.stat(f"/proc/{b.pid}/root/tmp").st_dev
    finally:
        a.close()
        b.close()


def test_killing_a_worker_takes_its_whole_sandbox(spawner):
    worker = started(spawner)
    holder = worker.proc.holder
    assert holder is not None
    pid, holder_pid = worker.pid, holder.pid
    worker.kill()
    assert gone(pid) and gone(holder_pid)
    assert worker.proc.returncode == -signal.SIGKILL


def test_nothing_outlives_a_killed_evaluator(tmp_path):
    """The evaluator dies (SIGKILL: no clean-up runs): its zygotes, the keepers, the workers and
    their sandboxes go with it."""
    script = tmp_path / "evaluator.py"
    script.write_text(
        "import json, os, sys, time\n"
        "from tools.options import EvalOptions, resolved\n"
        "from tools.processes.spawner import Spawner\n"
        "from tools.processes import zygote\n"
        "sp = Spawner(resolved(EvalOptions(device='cpu')))\n"
        "w = sp.spawn('candidate'); w.wait_ready(120)\n"
        "zs = [z.proc.pid for z in zygote._zygotes.values()]\n"
        "print(json.dumps({'worker': w.pid, 'holder': w.proc.holder.pid, 'zygotes': zs}), flush=True)\n"
        "time.sleep(600)\n")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep)}
    proc = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, env=env, cwd=ROOT)
    try:
        line = proc.stdout.readline()
        pids = json.loads(line)
    finally:
        proc.kill()
        proc.wait()
    for pid in [pids["worker"], pids["holder"], *pids["zygotes"]]:
        assert gone(pid), f"process {pid} outlived its evaluator"


def fake_bwrap(tmp_path: Path) -> Path:
    """A 'bwrap' that builds nothing: it runs its command in our own namespaces, as bwrap's child,
    and reports that child as the sandbox's first process, closing the info descriptor as bwrap
    does (left open, the reader waited its whole 60 s timeout for the end of it)."""
    fake = tmp_path / "bwrap"
    fake.write_text(
        "#!/bin/bash\n"
        "info=$2\n"
        "while [ \"$1\" != -- ]; do shift; done; shift\n"
        "\"$@\" <&0 {info}>&- &\n"
        "echo \"{\\\"child-pid\\\": $!}\" >&$info\n"
        "exec {info}>&-\n"
        "wait\n")
    fake.chmod(0o755)
    return fake


def test_a_sandbox_that_was_not_built_gets_no_worker(tmp_path):
    fake = fake_bwrap(tmp_path)
    plan = Launch(argv=[], env={"PATH": "/usr/bin:/bin"},
                  fork=Fork(holder=[str(fake), "--", *bwrap.HOLDER_COMMAND], confined=True, cwd=str(tmp_path)))
    r, w = os.pipe()
    log = os.open(tmp_path / "log", os.O_WRONLY | os.O_CREAT)
    try:
        with pytest.raises(zygote.ZygoteFailed, match="made no new mnt, net, ipc, uts, pid namespace"):
            zygote.start(plan, (r, w, w), log, {}, str(tmp_path))
    finally:
        for fd in (r, w, log):
            os.close(fd)


def test_a_worker_refuses_the_hosts_namespaces():
    """The worker's own check (tools/zygote/enter.py), the last word before it serves: a namespace
    that is the zygote's, or one it is not in, or one it lacks, stops it."""
    own = enter.own_namespaces()
    with pytest.raises(enter.EnterFailed, match="is the host's"):
        enter.check_namespaces(own, hosts=own)
    with pytest.raises(enter.EnterFailed, match="not in the sandbox's mnt namespace"):
        enter.check_namespaces({**own, "mnt": own["mnt"] + 1}, hosts={})
    with pytest.raises(enter.EnterFailed, match="no namespace of its own for net"):
        enter.check_namespaces({k: v for k, v in own.items() if k != "net"}, hosts={})


def test_workers_can_still_be_started_by_exec(monkeypatch, tmp_path):
    """RATCHET_WORKER_START=exec: bwrap runs the worker itself (and setpriv drops the uid), as
    before the zygote; an honest kernel is accepted that way too."""
    monkeypatch.setenv("RATCHET_WORKER_START", "exec")
    sp = Spawner(resolved(EvalOptions(device="cpu")))
    try:
        worker = sp.spawn("candidate")
        worker.wait_ready(120)
        assert isinstance(worker.proc, subprocess.Popen) and worker.wrapped  # bwrap's own process
        inside = [p for p in descendants(worker.pid) if status(p)["Name"].startswith("python")]
        assert inside and all(int(status(p)["CapEff"], 16) == 0 and status(p)["Seccomp"] == "2" for p in inside)
        worker.close()
    finally:
        sp.close()
    with Evaluator(PROBLEMS / "elementwise.py", options(tmp_path / "cache")) as ev:
        result = ev.evaluate(source("elementwise_ok"))
    assert_ok(result)
    assert result.phases["boot_torch"] > 0.05  # a real import of torch, in the worker


def test_a_zygote_with_a_request_reserved_is_neither_evicted_nor_closed_under_it():
    """zygote_for() reserves the request it is asked for under the registry's lock, so another
    environment's start cannot evict the zygote before the request is sent; a zygote discarded while
    a request waits on it is closed when that request is answered, not under it (the batch tests'
    "zygote ended before it forked this worker" under the full suite's load)."""
    def env(key: str) -> dict[str, str]:
        return {**os.environ, "PYTHONPATH": str(ROOT), "RATCHET_TEST_ZYGOTE": key}

    reserved = zygote.zygote_for(env("reserved"))
    others = []
    try:
        assert reserved.pending == 1
        others = [zygote.zygote_for(env(f"idle-{i}"), reserve=False) for i in range(zygote.MAX_ZYGOTES)]
        assert reserved.alive() and reserved.proc.poll() is None  # the idle ones went first
        assert not others[0].alive()  # the least recently used idle one was evicted
        zygote.discard(reserved)
        assert reserved.retired and reserved.alive()  # its request still waits on it
        reserved.answered()
        assert not reserved.alive()  # closed with its last request
    finally:
        for z in [reserved, *others]:
            if z.pending > 0:
                z.pending = 0
            zygote.discard(z)
