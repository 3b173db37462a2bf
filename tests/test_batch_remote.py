"""A batch task on another machine (agent.batch_remote) writing through the driver's workspace
service (agent.batch_service), without Ray: a LocalChannel (every request and answer pickled) to a
real service on a temporary workspace, the real agent, evaluator (CPU, Triton's interpreter) and
scripted model on the loopback server. Attempts land in the driver's workspace while the run goes
on; a run that lost its lease writes nothing; an interrupted run resumes from the driver's
checkpoint; the node never reads the driver's problem file."""
from __future__ import annotations

import json
import shutil
import sqlite3
from pathlib import Path

import pytest
from langgraph.checkpoint.base import empty_checkpoint

from agent.batch_channel import Fenced, LocalChannel, Request, ServiceError
from agent.batch_log import RunLog
from agent.batch_problem import ROW_SCHEMA, crashed_row, make_spec
from agent.batch_remote import run_remote_problem
from agent.batch_service import WorkspaceService
from agent.cli import main
from agent.workspace import TRAJECTORIES, Workspace
from agent.workspace_attempt import parse_trailers
from helpers_batch import SUITE, SuiteLoopback, candidate, quiet_batch_env
from helpers_workspace import git
from helpers_workspace_checks import assert_consistent
from loopback import submit
from tools.record import fault_result

A, B = "01_swish_scale", "05_row_sum_scale"
pytestmark = pytest.mark.timeout(120)


@pytest.fixture
def remote_env(monkeypatch):
    quiet_batch_env(monkeypatch)


class DriverSide:
    """The driver's half: its problem file (a copy of a suite problem), workspace and service."""

    def __init__(self, tmp_path: Path, session: str = "s1"):
        self.problem = tmp_path / "suite" / f"{A}.py"
        self.problem.parent.mkdir(exist_ok=True)
        shutil.copy(SUITE / f"{A}.py", self.problem)
        self.original = self.problem.read_bytes()
        self.ws = tmp_path / "ws"
        self.log: list[str] = []
        self.service = WorkspaceService(self.ws, {A: self.problem}, session, log=self.log.append)
        self.channel = LocalChannel(self.service)

    def spec(self, server, **extra) -> dict:
        settings = {"model": "scripted", "base_url": server.url, "max_attempts": 3, "workspace": str(self.ws)}
        return {**make_spec(self.problem, settings=settings), "executor": "ray", "node": "node-7", **extra}

    def attempts(self) -> list:
        if not (self.ws / A).is_dir():
            return []
        with Workspace(self.ws).open_existing(A) as repo:
            return repo.attempts()

    def call(self, token: str | None, op: str, **args):
        return self.channel.call(Request(A, token, op, args))


class Watching(SuiteLoopback):
    """Runs `on_turn(n)` in the server when the model is asked for its n-th reply, before answering."""

    def __init__(self, scripts, on_turn):
        super().__init__(scripts, lifetime_s=110)
        self.on_turn = on_turn

    def _next_step(self, request):
        if self.problem_of(request) == A:
            self.on_turn(len(self.by_problem[A]) + 1)
        return super()._next_step(request)


def test_remote_run_commits_in_the_driver_workspace_as_it_goes(remote_env, tmp_path):
    driver = DriverSide(tmp_path)
    driver.problem.rename(tmp_path / "moved-away.py")  # the node must never read the driver's file
    seen: dict[int, list] = {}
    scripts = {A: [submit(candidate(B)), submit(candidate(A))]}  # another problem's kernel, then the right one
    with Watching(scripts, lambda turn: seen.setdefault(turn, driver.attempts())) as server:
        row = run_remote_problem(driver.spec(server), driver.channel)
    assert row["status"] == "finished" and row["correct"] and row["verdict"] == "ok", row
    assert row["schema"] == ROW_SCHEMA == 2 and row["executor"] == "ray" and row["node"] == "node-7"
    assert row["attempts"] == 2 and row["best_attempt"] == 2 and row["resumed"] is False
    assert row["workspace"] == str(driver.ws / A) and row["path"] == str(driver.problem.resolve())
    # attempt 1 was in the driver's workspace when the model was asked for its second kernel
    assert seen[1] == [] and [a.number for a in seen[2]] == [1]
    with Workspace(driver.ws).open_existing(A) as repo:
        assert_consistent(repo)  # numbers 1..n, the best rule replayed, one commit per attempt on main
        attempts = repo.attempts()
        assert [a.number for a in attempts] == [1, 2] and attempts[1].verdict.value == "ok"
        assert {a.run_id for a in attempts} == {row["run_id"]} and {a.model for a in attempts} == {"scripted"}
        assert repo.best().number == 2 and repo.best_path.read_text() == candidate(A)
        assert [t.run_id for t in repo.trajectories()] == [row["run_id"]]
        assert repo.reference_source().encode() == driver.original  # keyed by the bytes the service read
        # the same trailers a local commit of these attempts gets
        local = Workspace(tmp_path / "local").open_problem(tmp_path / "moved-away.py")
        with local:
            for a in attempts:
                mine = local.commit_attempt(repo.source(a), repo.record(a), model=a.model, run_id=a.run_id)
                assert trailers(local.path, mine.sha) == trailers(repo.path, a.sha)
    pointer = json.loads((driver.ws / ".ratchet" / f"{A}.run.json").read_text())
    assert pointer["run_id"] == row["run_id"] and pointer["finished"] is True
    with sqlite3.connect(driver.ws / ".ratchet" / f"{A}.sqlite") as db:
        assert db.execute("select count(*) from checkpoints where thread_id = ?", (row["run_id"],)).fetchone()[0] > 3
    assert driver.log == []  # no op failed


def trailers(repo: Path, sha: str) -> dict[str, str]:
    return parse_trailers(git(repo, "log", "-1", "--format=%(trailers:only,unfold)", sha).stdout)


def test_a_second_lease_fences_the_first(tmp_path):
    driver = DriverSide(tmp_path)
    first = driver.call(None, "acquire", since=None)
    assert first["problem_text"].encode() == driver.original and first["problem_name"] == f"{A}.py"
    assert first["resume"] is False
    second = driver.call(None, "acquire", since=None)
    assert second["token"] != first["token"] and second["token"].startswith("s1:")
    repo_path = driver.ws / A
    head = git(repo_path, "rev-parse", "main").stdout
    result = fault_result(RuntimeError("x"), problem=A, source="src").to_dict()
    config = {"configurable": {"thread_id": "run-1", "checkpoint_ns": ""}}
    stale = first["token"]
    for op, args in (("commit_attempt", {"source": "src", "result": result, "model": "m", "run_id": "run-1"}),
                     ("save_trajectory", {"run_id": "run-1", "text": "hello"}),
                     ("put", {"config": config, "checkpoint": empty_checkpoint(), "metadata": {}, "new_versions": {}}),
                     ("write_pointer", {"data": {"run_id": "run-1", "finished": False}}),
                     ("attempts", {}), ("release", {})):
        with pytest.raises(Fenced, match=f"problem {A}: {op} with lease {stale} refused"):
            driver.call(stale, op, **args)
    # nothing of the fenced writes: main, the trajectories ref, the checkpoints, the pointer
    assert git(repo_path, "rev-parse", "main").stdout == head
    assert git(repo_path, "rev-parse", "-q", "--verify", TRAJECTORIES, check=False).returncode != 0
    assert not (driver.ws / ".ratchet" / f"{A}.sqlite").exists()
    assert not (driver.ws / ".ratchet" / f"{A}.run.json").exists()
    # the holder of the lease writes
    attempt = driver.call(second["token"], "commit_attempt", source="src", result=result, model="m", run_id="run-1")
    assert attempt.number == 1 and [a.number for a in driver.attempts()] == [1]
    saved = driver.call(second["token"], "put", config=config, checkpoint=empty_checkpoint(), metadata={},
                        new_versions={})
    assert saved["configurable"]["thread_id"] == "run-1"
    assert driver.call(second["token"], "get_tuple", config=saved).checkpoint["id"] == saved["configurable"]["checkpoint_id"]
    # an op that fails is one line to the node, its traceback in the driver's log; unknown ops and keys are refused
    with pytest.raises(ServiceError, match=f"^problem {A}: source failed: ValueError: no attempt with commit"):
        driver.call(second["token"], "source", sha="0" * 40)
    assert any("Traceback" in line for line in driver.log)
    with pytest.raises(ServiceError, match="unknown operation '_close'"):
        driver.call(second["token"], "_close")
    with pytest.raises(ServiceError, match="not in this batch"):
        driver.channel.call(Request("other", second["token"], "attempts", {}))
    # a later session of the driver refuses this one's tokens
    driver.service.close()
    later = WorkspaceService(driver.ws, {A: driver.problem}, "s2")
    lease = later.handle(Request(A, None, "acquire", {"since": None}))
    assert lease["token"] == "s2:1"
    with pytest.raises(Fenced):
        later.handle(Request(A, second["token"], "attempts", {}))
    later.handle(Request(A, lease["token"], "release", {}))
    with pytest.raises(Fenced, match="no lease is out"):
        later.handle(Request(A, lease["token"], "attempts", {}))


def test_a_run_that_lost_its_lease_stops_and_writes_nothing_more(remote_env, tmp_path):
    driver = DriverSide(tmp_path)
    taken: list[str] = []

    def take_over(turn: int) -> None:  # a retry of this task, presumed dead, starts elsewhere
        if turn == 2:
            taken.append(driver.call(None, "acquire", since=None)["token"])

    with Watching({A: [submit(candidate(B)), submit(candidate(A))]}, take_over) as server:
        row = run_remote_problem(driver.spec(server), driver.channel)
    assert taken and row["status"] == "fenced" and row["verdict"] == "fenced", row
    assert "refused" in row["error"] and row["executor"] == "ray"
    assert [a.number for a in driver.attempts()] == [1]  # its second kernel was never committed
    pointer = json.loads((driver.ws / ".ratchet" / f"{A}.run.json").read_text())
    assert pointer["finished"] is False


def test_an_interrupted_remote_run_resumes_from_the_driver_checkpoint(remote_env, tmp_path, capsys):
    driver = DriverSide(tmp_path)
    scripts = {A: [submit(candidate(B))]}  # then the script runs out: the model fails mid-problem
    with SuiteLoopback(scripts, lifetime_s=110) as server:
        spec = driver.spec(server, resume=True, since=None)
        first = run_remote_problem(spec, driver.channel)
        assert first["status"] == "model_error" and first["attempts"] == 1, first
        server.scripts[A].append(submit(candidate(A)))
        asked = len(server.by_problem[A])
        second = run_remote_problem(spec, driver.channel)  # a new task: a new lease, another scratch dir
        continued = server.by_problem[A][asked].messages
    assert second["status"] == "finished" and second["correct"] and second["resumed"] is True, second
    assert second["run_id"] == first["run_id"] and second["attempts"] == 2 and second["best_attempt"] == 2
    assert "resuming run" in capsys.readouterr().err
    # the conversation went on from the checkpoint: the first kernel's outcome is in the next request
    assert any(m.get("role") == "tool" for m in continued)
    attempts = driver.attempts()
    assert [a.number for a in attempts] == [1, 2] and {a.run_id for a in attempts} == {first["run_id"]}
    assert len({a.source_sha256 for a in attempts}) == 2  # none evaluated twice
    with Workspace(driver.ws).open_existing(A) as repo:
        assert_consistent(repo)
    assert driver.log == []  # every request, the model error's checkpoint write too, was carried out


def test_report_reads_schema_1_and_schema_2_rows(tmp_path, capsys):
    run = tmp_path / "run"
    run.mkdir()
    old = {"schema": 1, "problem": "1_old", "status": "finished", "verdict": "ok", "correct": True,
           "timing_measured": False, "speedup_vs_eager": None, "speedup_vs_compile": None, "roofline_fraction": None,
           "attempts": 2, "tokens": 10, "device_s": 1.0, "device": "cpu"}
    new = crashed_row({"key": "2_new", "problem": "/x/2_new.py", "device": "cpu", "executor": "ray", "node": "n1"},
                      "node died", 3.0)
    assert new["schema"] == 2 and new["executor"] == "ray" and new["node"] == "n1"
    log = RunLog(run / "results.jsonl")
    log.append(old)
    log.append(new)
    (run / "run.json").write_text(json.dumps({"batch": 1, "suite": "/x", "problems": ["1_old", "2_new"],
                                              "settings": {"model": "m"}, "device": "cpu"}))
    assert main(["report", str(run), "--json"]) == 0
    out = capsys.readouterr().out
    assert "1_old" in out and "2_new" in out
