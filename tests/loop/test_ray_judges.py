"""`ratchet optimize --ray` (agent/loop/ray_judges.py): one problem's candidates judged by actors on
a real local Ray cluster (CPUs, Triton's interpreter), the run and its workspace on the driver. A
wide step's two candidates go to two judges at once, each attempt is committed here, the summary
says which judge judged what, and no judge (nor any worker of its evaluator) outlives the run. Then
the flags' mistakes: each is one line and its exit code."""
from __future__ import annotations

import json
import os
import signal
import sys
import threading
import time
from pathlib import Path

import pytest

from agent.cli import main
from agent.cli.exit_codes import EXIT_CLUSTER, EXIT_USAGE
from agent.loop.ray_judges import JudgesUnavailable, judge_count
from agent.workspace.root import Workspace
from helpers_agent import quiet_agent_env
from helpers_ray import LocalCluster, alive, descendants
from loopback import Loopback, submit

ROOT = Path(__file__).resolve().parents[2]
PROBLEM = ROOT / "tests" / "agent_problems" / "relu_add.py"
pytestmark = pytest.mark.timeout(300)


@pytest.fixture(scope="module")
def cluster():
    os.environ["RAY_AUTH_MODE"] = "disabled"  # a throwaway cluster on this host; its drivers inherit this
    c = LocalCluster(num_cpus=2, env={"TRITON_INTERPRET": "1"})
    yield c
    c.stop()


@pytest.fixture
def agent_env(monkeypatch):
    quiet_agent_env(monkeypatch, "RAY_ADDRESS", RATCHET_STOP_UNTIMED="0", RATCHET_PATIENCE="0")
    monkeypatch.setenv("PYTHONPATH", str(ROOT))


def titled(cluster: LocalCluster, prefix: bytes) -> list[int]:
    """The cluster's live processes whose title starts with `prefix` (Ray titles an actor's process
    `ray::Class` and, while a method runs, `ray::Class.method`)."""
    found = []
    for pid in descendants(cluster.proc.pid):
        try:
            title = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")[0]
        except OSError:
            continue
        if title.startswith(prefix) and alive(pid):
            found.append(pid)
    return found


def judge_processes(cluster: LocalCluster) -> set[int]:
    """The cluster's processes that are, or were started by, a judge actor."""
    return {p for pid in titled(cluster, b"ray::JudgeActor") for p in {pid} | descendants(pid) if alive(p)}


def test_a_wide_step_is_judged_by_two_judges_on_the_cluster(cluster, agent_env, tmp_path, capsys):
    sys.path.insert(0, str(PROBLEM.parent))
    from relu_add_candidates import BROKEN, FIXED

    with Loopback([submit(BROKEN, meet=2), submit(FIXED, meet=2)]) as server:
        code = main(["optimize", str(PROBLEM), "--model", "scripted", "--base-url", server.url, "--workspace",
                     str(tmp_path), "--json", "--width", "2", "--max-attempts", "2", "--device", "cpu",
                     "--ray", cluster.address, "--judges", "2"])
        captured = capsys.readouterr()
    summary = json.loads(captured.out)
    assert code == 0, captured.err
    assert "starting 2 judges" in captured.err
    with Workspace(tmp_path).open_existing(PROBLEM) as repo:  # committed here, on the driver
        done = repo.attempts()
        records = [repo.record(a) for a in done]
    assert sorted(a.ok for a in done) == [False, True] and summary["attempts"] == 2
    # both judges were asked at once (the replies came together): one candidate each, on two processes
    judges = summary["judges"]
    assert [j["judged"] for j in judges] == [1, 1] and all(j["device"] == "cpu" for j in judges), judges
    assert {r["environment"]["host"] for r in records} == {j["host"] for j in judges}
    deadline = time.monotonic() + 30
    while judge_processes(cluster) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not judge_processes(cluster)  # every judge, and its evaluator's workers, ended with the run


def test_a_judge_killed_mid_evaluation_is_an_evaluator_fault_and_comes_back(cluster, agent_env, tmp_path, capsys):
    sys.path.insert(0, str(PROBLEM.parent))
    from relu_add_candidates import FASTER, FIXED

    killed: list[int] = []

    def kill_the_judge() -> None:
        deadline = time.monotonic() + 200
        while not killed and time.monotonic() < deadline:
            busy = titled(cluster, b"ray::JudgeActor.evaluate")
            if busy:
                os.kill(busy[0], signal.SIGKILL)
                killed.append(busy[0])
            time.sleep(0.05)

    killer = threading.Thread(target=kill_the_judge, daemon=True)
    killer.start()
    with Loopback([submit(FIXED), submit(FASTER)]) as server:
        code = main(["optimize", str(PROBLEM), "--model", "scripted", "--base-url", server.url, "--workspace",
                     str(tmp_path), "--json", "--max-attempts", "2", "--device", "cpu", "--ray", cluster.address])
        captured = capsys.readouterr()
    killer.join(1)
    summary = json.loads(captured.out)
    assert killed and code == 0, captured.err[-4000:]
    with Workspace(tmp_path).open_existing(PROBLEM) as repo:
        done = repo.attempts()
    # the first candidate's judge died under it: an evaluator fault, not a verdict on the candidate;
    # Ray made the judge again (its evaluator, its baselines), and it judged the next one
    assert [a.verdict.value for a in done] == ["error", "ok"], done
    assert summary["judges"][0]["judged"] == 2 and summary["judges"][0]["restarts"] == 1 and not alive(killed[0])
    deadline = time.monotonic() + 30
    while judge_processes(cluster) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not judge_processes(cluster)


def test_judges_a_cluster_cannot_hold_are_refused_before_any_starts():
    """A GPU run on a cluster of CPUs, or more judges than it has GPUs: Ray would wait for them for
    ever, so the run refuses (exit 15, through the same line as an unreachable cluster, below)."""
    with pytest.raises(JudgesUnavailable, match="the Ray cluster has no GPU to judge on"):
        judge_count(None, gpus=0, cpu=False)
    with pytest.raises(JudgesUnavailable, match="--judges 3: the Ray cluster has 2 GPUs"):
        judge_count(3, gpus=2, cpu=False)
    assert judge_count(None, gpus=2, cpu=False) == 2 and judge_count(None, gpus=0, cpu=True) == 1


def test_the_flags_mistakes_are_one_line_each(cluster, agent_env, tmp_path, capsys, monkeypatch):
    monkeypatch.delenv("RATCHET_DEVICE", raising=False)  # a GPU run unless --device cpu is given
    base = ["optimize", str(PROBLEM), "--model", "scripted", "--base-url", "http://127.0.0.1:9/v1",
            "--workspace", str(tmp_path)]
    cases = [
        (["--judges", "2"], EXIT_USAGE, "--judges and --ray-code go with --ray"),
        (["--ray", cluster.address, "--judges", "0", "--device", "cpu"], EXIT_USAGE, "--judges must be at least 1"),
        (["--ray", cluster.address, "--device", "cuda:1"], EXIT_USAGE, "--device takes only cpu with it"),
        (["--ray", "127.0.0.1:1", "--device", "cpu"], EXIT_CLUSTER, "cannot reach the Ray cluster"),
    ]
    for extra, expected, words in cases:
        code = main(base + extra)
        err = capsys.readouterr().err
        assert code == expected and words in err and "Traceback" not in err, (extra, code, err)
        assert len(err.strip().splitlines()) == 1, err
    assert not (tmp_path / "relu_add").exists() and not any(tmp_path.iterdir())  # no workspace was made


def test_without_ray_installed_one_line_says_how(agent_env, tmp_path, capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "ray", None)  # as if the package were absent: `import ray` raises ImportError
    code = main(["optimize", str(PROBLEM), "--model", "scripted", "--base-url", "http://127.0.0.1:9/v1",
                 "--workspace", str(tmp_path), "--ray", "auto", "--device", "cpu"])
    assert code == EXIT_USAGE
    assert capsys.readouterr().err == "ratchet optimize: --ray needs Ray: pip install -e '.[ray]'\n"
