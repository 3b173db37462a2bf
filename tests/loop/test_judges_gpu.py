"""One problem's candidates judged on two GPUs at once (issue 40): over this host's cards
(`--device cuda:0,cuda:1`) and over a Ray cluster's (`--ray`, a local cluster offering both cards).
Each candidate is judged alone on its card and timed there against that card's own eager; the two
evaluations overlap, so the run's busy seconds (the union) are well under their sum.

    python -m pytest -m gpu tests/loop/test_judges_gpu.py     # on a machine with two GPUs
"""
from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

from agent.cli import main
from agent.workspace.root import Workspace
from helpers_agent import quiet_agent_env
from helpers_ray import LocalCluster
from loopback import Loopback, submit

ROOT = Path(__file__).resolve().parents[2]
PROBLEM = ROOT / "tests" / "agent_problems" / "relu_add.py"


def gpus() -> int:
    import torch

    return torch.cuda.device_count() if torch.cuda.is_available() else 0


pytestmark = [pytest.mark.gpu, pytest.mark.timeout(600),
              pytest.mark.skipif(gpus() < 2, reason="needs two GPUs")]


@pytest.fixture
def agent_env(monkeypatch):
    quiet_agent_env(monkeypatch, "RAY_ADDRESS", RATCHET_STOP_UNTIMED="0", RATCHET_PATIENCE="0")
    monkeypatch.delenv("RATCHET_DEVICE", raising=False)
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    monkeypatch.setenv("PYTHONPATH", str(ROOT))


def run_wide(tmp_path: Path, capsys, *where: str) -> tuple[dict, list[dict]]:
    sys.path.insert(0, str(PROBLEM.parent))
    from relu_add_candidates import FASTER, FIXED

    with Loopback([submit(FIXED, meet=2), submit(FASTER, meet=2)]) as server:
        code = main(["optimize", str(PROBLEM), "--model", "scripted", "--base-url", server.url, "--workspace",
                     str(tmp_path), "--json", "--width", "2", "--max-attempts", "2", *where])
        captured = capsys.readouterr()
    assert code == 0, captured.err[-3000:]
    with Workspace(tmp_path).open_existing(PROBLEM) as repo:
        records = [repo.record(a) for a in repo.attempts()]
    return json.loads(captured.out), records


def check_two_cards(summary: dict, records: list[dict]) -> None:
    assert len(records) == 2 and all(r["verdict"] == "ok" for r in records), records
    for r in records:  # each timed on its card, against its own card's eager
        assert r["candidate_time"]["measured"] and r["eager_time"]["measured"], r
    judged = sum(sum(r["phases"].values()) for r in records)
    print(f"busy (union) {summary['judge_s']:.2f} s against {judged:.2f} s of evaluations")
    assert summary["judge_s"] < 0.8 * judged  # the two evaluations overlapped


def test_a_wide_step_is_judged_on_two_cards_of_this_host(agent_env, tmp_path, capsys):
    summary, records = run_wide(tmp_path, capsys, "--device", "cuda:0,cuda:1")
    assert sorted(r["environment"]["device"] for r in records) == ["cuda:0", "cuda:1"]
    check_two_cards(summary, records)


def test_a_wide_step_is_judged_on_two_gpus_of_a_ray_cluster(agent_env, tmp_path, capsys):
    os.environ["RAY_AUTH_MODE"] = "disabled"
    cluster = LocalCluster(num_cpus=4, num_gpus=2)
    try:
        summary, records = run_wide(tmp_path, capsys, "--ray", cluster.address)
    finally:
        cluster.stop()
    judges = summary["judges"]
    assert [j["judged"] for j in judges] == [1, 1] and len({tuple(j["gpu_ids"]) for j in judges}) == 2, judges
    assert all(j["gpu"] for j in judges)
    check_two_cards(summary, records)
