"""`ratchet batch --ray` on a real local Ray cluster (CPUs, Triton's interpreter): the real CLI,
Ray tasks, the mailbox, the driver's WorkspaceService and the agent, against a scripted model on
the loopback server. Every attempt lands in the driver's workspace, and its log line in the
driver's logs/<problem>.log; a Ray worker SIGKILLed in the middle of a problem is retried and
continues the run; a driver SIGTERMed takes the sandboxed worker tree of its tasks with it, and
--resume finishes the run. (`ray://`, a driver outside the cluster: tests/batch/test_batch_ray_client.py.)"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from agent.batch.log import RunLog
from agent.batch.problem import make_spec
from agent.batch.ray_slots import _cause, node_spec, runtime_env
from agent.cli import main
from agent.workspace.root import Workspace
from helpers_batch import SUITE, SuiteLoopback, candidate, quiet_batch_env
from helpers_ray import LocalCluster, alive, busy_workers, descendants
from loopback import hold, submit

ROOT = Path(__file__).resolve().parents[2]
A, B = "01_swish_scale", "05_row_sum_scale"
FILTER = "^(01_swish_scale|05_row_sum_scale)$"
SECRET = "sk-test-never-travels-0123456789"

pytestmark = pytest.mark.timeout(480)  # a loaded 2-core machine interprets every kernel


@pytest.fixture(scope="module")
def cluster():
    os.environ["RAY_AUTH_MODE"] = "disabled"  # a throwaway cluster on this host; its drivers inherit this
    # the nodes' own settings (a node reads its environment; only the command line's settings travel)
    c = LocalCluster(num_cpus=2, env={"RATCHET_TRIALS": "2", "RATCHET_RETRY_ATTEMPTS": "3", "RATCHET_RETRY_BASE_S": "0.01",
                                      "RATCHET_RETRY_MAX_S": "0.05", "TRITON_INTERPRET": "1"})
    yield c
    c.stop()


@pytest.fixture
def batch_env(monkeypatch):
    quiet_batch_env(monkeypatch, "RAY_ADDRESS")
    monkeypatch.setenv("OPENAI_API_KEY", SECRET)
    monkeypatch.setenv("PYTHONPATH", str(ROOT))


def batch_args(server, tmp_path: Path, cluster, *extra: str) -> list[str]:
    return ["batch", str(SUITE), "--filter", FILTER, "--model", "scripted", "--base-url", server.url,
            "--max-attempts", "3", "--out", str(tmp_path / "run"), "--workspace", str(tmp_path / "ws"),
            "--ray", cluster.address, "--cpu-workers", "1", *extra]


def start_batch(server, tmp_path: Path, cluster) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "agent.cli", *batch_args(server, tmp_path, cluster)],
                            cwd=tmp_path, env=os.environ.copy(), stdout=subprocess.PIPE, stderr=subprocess.PIPE)


def wait_for(predicate, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.1)


def attempts_of(tmp_path: Path, name: str) -> list:
    with Workspace(tmp_path / "ws").open_existing(SUITE / f"{name}.py") as repo:
        return repo.attempts()


def agent_log(tmp_path: Path, name: str) -> list[str]:
    """The problem's agent log in the driver's run directory."""
    return (tmp_path / "run" / "logs" / f"{name}.log").read_text().splitlines()


def the_busy_worker(proc: subprocess.Popen, cluster: LocalCluster) -> int:
    found: list[int] = []
    wait_for(lambda: bool(found.extend(busy_workers(cluster.proc.pid)) or found) or proc.poll() is not None, 30, "the busy task")
    assert proc.poll() is None and len(found) == 1, found
    return found[0]


def test_a_worker_killed_mid_problem_is_retried_and_every_attempt_lands_in_the_driver_workspace(
        cluster, batch_env, tmp_path):
    scripts = {A: [submit(candidate(A))],
               B: [submit(candidate(A)), hold(), submit(candidate(B))]}  # swish for a row sum: not correct
    with SuiteLoopback(scripts, lifetime_s=460) as server:
        proc = start_batch(server, tmp_path, cluster)
        try:
            wait_for(lambda: server.held.is_set() or proc.poll() is not None, 240, "B's held model call")
            worker = the_busy_worker(proc, cluster)
            # B's first attempt is already in the driver's workspace, while the run goes on
            first = [a.verdict.value for a in attempts_of(tmp_path, B)]
            assert len(first) == 1 and first != ["ok"]
            # and so is its log line, in the driver's logs/<problem>.log (the node's is on its worker's stderr)
            assert f"[1/3] attempt 1: {first[0]}; no correct kernel yet" in agent_log(tmp_path, B)
            os.kill(worker, signal.SIGKILL)  # as a node's death or Ray's memory killer would
            server.release()
            out, err = proc.communicate(timeout=200)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    assert proc.returncode == 0, err.decode()[-3000:]
    assert json.loads(out)["correct"] == 2  # stdout holds the summary only (Ray's retry notices go to stderr)
    assert b"will be retried" in err
    latest = RunLog(tmp_path / "run" / "results.jsonl").latest()
    for name in (A, B):
        row = latest[name]
        assert row["status"] == "finished" and row["correct"] and row["executor"] == "ray", row
        assert row["node"] and row["ray_node_id"] and row["device"] == "cpu" and row["gpu"] is None
    assert latest[B]["resumed"] is True  # the retry continued the run its killed task began
    attempts = attempts_of(tmp_path, B)
    assert [a.number for a in attempts] == list(range(1, len(attempts) + 1))  # numbered once
    assert [a.verdict.value for a in attempts] == [*first, "ok"]
    assert {a.run_id for a in attempts} == {latest[B]["run_id"]}
    assert [a.verdict.value for a in attempts_of(tmp_path, A)] == ["ok"]
    # every attempt's line is in the driver's logs/<problem>.log, the retry's too, as for a local batch
    assert "[1/3] attempt 1: ok; run's best: attempt 1 (not timed)  new best" in agent_log(tmp_path, A)
    b_log = agent_log(tmp_path, B)
    assert f"[1/3] attempt 1: {first[0]}; no correct kernel yet" in b_log
    assert "[2/3] attempt 2: ok; run's best: attempt 2 (not timed)  new best" in b_log
    assert sum(line.startswith(f"resuming run {latest[B]['run_id']}: 1 attempts used") for line in b_log) == 1
    meta = json.loads((tmp_path / "run" / "run.json").read_text())
    assert meta["executor"] == "ray" and meta["address"] == cluster.address
    assert meta["sessions"][0]["ray"]["code"] == "ship"
    # ratchet's own readers see a Ray run as a local one
    assert main(["report", str(tmp_path / "run")]) == 0


def test_a_cancelled_batch_takes_the_worker_tree_with_it_and_resumes(cluster, batch_env, tmp_path, capsys):
    scripts = {A: [submit(candidate(A))],
               B: [submit(candidate(A)), hold(), submit(candidate(B))]}  # swish for a row sum: incorrect
    with SuiteLoopback(scripts, lifetime_s=460) as server:
        proc = start_batch(server, tmp_path, cluster)
        try:
            wait_for(lambda: server.held.is_set() or proc.poll() is not None, 240, "B's held model call")
            worker = the_busy_worker(proc, cluster)
            tree = descendants(worker)
            assert tree, "the task's evaluator has no worker processes to check"
            proc.send_signal(signal.SIGTERM)  # as Ctrl-C: the driver cancels its tasks
            out, err = proc.communicate(timeout=60)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        assert proc.returncode == 130, err.decode()[-3000:]
        wait_for(lambda: not any(alive(pid) for pid in tree), 20, "the cancelled task's worker tree to end")
        first = [a.verdict.value for a in attempts_of(tmp_path, B)]
        assert len(first) == 1 and first != ["ok"]
        server.release()
        code = main(batch_args(server, tmp_path, cluster, "--resume"))
        err = capsys.readouterr().err
    assert code == 0, err[-3000:]
    latest = RunLog(tmp_path / "run" / "results.jsonl").latest()
    assert latest[B]["status"] == "finished" and latest[B]["resumed"] is True and latest[B]["correct"]
    attempts = attempts_of(tmp_path, B)
    assert [a.number for a in attempts] == [1, 2] and [a.verdict.value for a in attempts] == [*first, "ok"]
    assert len(json.loads((tmp_path / "run" / "run.json").read_text())["sessions"]) == 2


def test_a_slot_keeps_its_evaluator_warm_from_one_problem_to_the_next(cluster, batch_env, tmp_path, capsys):
    """One slot, two problems: the second problem's reference worker and spare candidate worker were
    started while the first ran (a slot is one actor, its process and warm pool live for the batch)."""
    scripts = {A: [submit(candidate(A))], B: [submit(candidate(B))]}
    with SuiteLoopback(scripts, lifetime_s=400) as server:
        code = main(batch_args(server, tmp_path, cluster))
    err = capsys.readouterr().err
    assert code == 0, err[-3000:]
    latest = RunLog(tmp_path / "run" / "results.jsonl").latest()
    assert latest[A]["correct"] and latest[B]["correct"]
    assert latest[A]["warm_workers"] == {"reference": 0, "candidate": 0}  # the slot's first problem
    assert latest[B]["warm_workers"] == {"reference": 1, "candidate": 1}
    assert [a.verdict.value for a in attempts_of(tmp_path, B)] == ["ok"]


def test_no_secret_and_no_driver_path_travels(tmp_path, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", SECRET)
    spec = make_spec(SUITE / f"{A}.py", settings={"model": "m", "base_url": "http://x/v1"},
                     config_file=str(tmp_path / "ratchet.toml"), log=tmp_path / "a.log")
    shipped = json.dumps([node_spec(spec, "cpu"), runtime_env("ship"), runtime_env("installed")])
    assert SECRET not in shipped and "api_key" not in shipped and "env_vars" not in shipped
    assert str(tmp_path) not in shipped  # neither the log nor the config file: they are the driver's
    assert runtime_env("installed") == {}


def test_usage_and_unreachable_cluster(batch_env, tmp_path, capsys):
    base = ["batch", str(SUITE), "--filter", FILTER, "--model", "m", "--base-url", "http://127.0.0.1:9/v1",
            "--out", str(tmp_path / "r")]
    assert main([*base, "--ray", "auto", "--gpus", "0"]) == 2
    assert "--ray or --gpus" in capsys.readouterr().err
    assert main([*base, "--api-key-env", "K"]) == 2
    assert "go with --ray" in capsys.readouterr().err
    assert main([*base, "--ray", "127.0.0.1:1", "--cpu-workers", "1"]) == 15
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--ray 127.0.0.1:1: cannot reach the Ray cluster" in err
    assert not (tmp_path / "r").exists()


def test_a_server_side_connect_failure_is_one_line_that_keeps_its_cause():
    # the shape Ray Client raises when the head cannot start the connection's server: a header line,
    # then the server's traceback (a CI run showed only the header, hiding why)
    raised = ConnectionAbortedError("Initialization failure from server:\nTraceback (most recent call last):\n"
                                    '  File "proxier.py", line 771, in Datapath\n'
                                    "TimeoutError: GetOrCreateRuntimeEnv request failed after 5 attempts.\n")
    assert _cause(raised) == ("Initialization failure from server: "
                              "TimeoutError: GetOrCreateRuntimeEnv request failed after 5 attempts.")
    assert _cause(ConnectionError("refused")) == "refused"
    assert _cause(TimeoutError()) == "TimeoutError"


def test_without_ray_installed_one_line_says_how(batch_env, tmp_path, capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "ray", None)  # as if the package were absent: `import ray` raises ImportError
    code = main(["batch", str(SUITE), "--model", "m", "--base-url", "http://127.0.0.1:9/v1", "--ray", "auto",
                 "--out", str(tmp_path / "r")])
    assert code == 2
    assert capsys.readouterr().err == "ratchet batch: --ray needs Ray: pip install -e '.[ray]'\n"
