"""`ratchet batch --ray ray://HOST:PORT`: the driver outside the cluster, through Ray Client. A real
head started by `ray start --head` with a Ray Client server (helpers_ray.ClientCluster), the real
CLI in its own process, a scripted model on the loopback server: the problem's attempt lands in
the driver's workspace and its agent log in the driver's run directory, and the row says where it
ran."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from agent.batch.log import RunLog
from agent.workspace.root import Workspace
from helpers_batch import SUITE, SuiteLoopback, candidate, quiet_batch_env
from helpers_ray import ClientCluster
from loopback import submit

ROOT = Path(__file__).resolve().parents[2]
A = "01_swish_scale"

pytestmark = pytest.mark.timeout(300)


@pytest.fixture
def client_cluster(monkeypatch):
    quiet_batch_env(monkeypatch, "RAY_ADDRESS")
    monkeypatch.setenv("RAY_AUTH_MODE", "disabled")  # a throwaway cluster on this host; the driver connects without a token
    monkeypatch.setenv("PYTHONPATH", str(ROOT))
    # the nodes' own settings (a node reads its environment; only the command line's settings travel)
    c = ClientCluster(num_cpus=2, env={"RATCHET_TRIALS": "2", "RATCHET_RETRY_ATTEMPTS": "3",
                                       "RATCHET_RETRY_BASE_S": "0.01", "RATCHET_RETRY_MAX_S": "0.05",
                                       "TRITON_INTERPRET": "1"})
    yield c
    c.stop()


def test_a_driver_outside_the_cluster_runs_a_problem_through_ray_client(client_cluster, tmp_path):
    assert client_cluster.address.startswith("ray://127.0.0.1:")
    with SuiteLoopback({A: [submit(candidate(A))]}, lifetime_s=280) as server:
        proc = subprocess.run(
            [sys.executable, "-m", "agent.cli", "batch", str(SUITE), "--filter", f"^{A}$", "--model", "scripted",
             "--base-url", server.url, "--max-attempts", "3", "--out", str(tmp_path / "run"),
             "--workspace", str(tmp_path / "ws"), "--ray", client_cluster.address, "--cpu-workers", "1"],
            cwd=tmp_path, env=os.environ.copy(), capture_output=True, timeout=240)
    assert proc.returncode == 0, f"{proc.stderr.decode()[-3000:]}\n{client_cluster.logs()}"
    assert json.loads(proc.stdout)["correct"] == 1
    row = RunLog(tmp_path / "run" / "results.jsonl").latest()[A]
    assert row["status"] == "finished" and row["correct"] and row["executor"] == "ray", row
    assert row["node"] and row["ray_node_id"] and row["device"] == "cpu" and row["gpu"] is None
    # the attempt was committed in the driver's workspace, by the driver's service
    with Workspace(tmp_path / "ws").open_existing(SUITE / f"{A}.py") as repo:
        attempts = repo.attempts()
    assert [a.verdict.value for a in attempts] == ["ok"] and {a.run_id for a in attempts} == {row["run_id"]}
    log = (tmp_path / "run" / "logs" / f"{A}.log").read_text().splitlines()
    assert "[1/3] attempt 1: ok; run's best: attempt 1 (not timed)  new best" in log
    meta = json.loads((tmp_path / "run" / "run.json").read_text())
    assert meta["executor"] == "ray" and meta["address"] == client_cluster.address
    assert meta["sessions"][0]["ray"]["nodes"] == 1 and meta["sessions"][0]["ray"]["cluster_cpus"] == 2
