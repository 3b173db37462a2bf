"""A batch task on another machine (agent.batch.remote) writing through the driver's workspace
service (agent.batch.service), without Ray: a LocalChannel (every request and answer pickled) to a
real service on a temporary workspace, the real agent, evaluator (CPU, Triton's interpreter) and
scripted model on the loopback server. Attempts land in the driver's workspace while the run goes
on, and so do the run's log lines in the driver's logs/<problem>.log; a run that lost its lease
writes nothing, its log lines included; a log line that cannot reach the driver fails nothing; an
interrupted run resumes from the driver's checkpoint; the node never reads the driver's problem
file."""
from __future__ import annotations

import json
import shutil
import sqlite3
from pathlib import Path

import pytest
from langgraph.checkpoint.base import empty_checkpoint

from agent.batch.channel import Fenced, LocalChannel, Request, ServiceError
from agent.batch.log import RunLog
from agent.batch.problem import ROW_SCHEMA, crashed_row, make_spec
from agent.batch.remote import run_remote_problem
from agent.batch.service import WorkspaceService
from agent.cli import main
from agent.workspace.root import TRAJECTORIES, Workspace
from agent.workspace.attempt import parse_trailers
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

    def __init__(self, tmp_path: Path, session: str = "s1", logs: Path | None = None):
        self.problem = tmp_path / "suite" / f"{A}.py"
        self.problem.parent.mkdir(exist_ok=True)
        shutil.copy(SUITE / f"{A}.py", self.problem)
        self.original = self.problem.read_bytes()
        self.ws = tmp_path / "ws"
        self.logs = logs or tmp_path / "run" / "logs"  # the run directory's logs/, as `ratchet batch` makes it
        if logs is None:
            self.logs.mkdir(parents=True)
        self.log: list[str] = []
        self.service = WorkspaceService(self.ws, {A: self.problem}, session, log=self.log.append, logs=self.logs)
        self.channel = LocalChannel(self.service)

    def agent_log(self) -> list[str]:
        """The lines of the problem's log in the driver's run directory."""
        path = self.logs / f"{A}.log"
        return path.read_text().splitlines() if path.exists() else []

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


def test_remote_run_commits_in_the_driver_workspace_as_it_goes(remote_env, tmp_path, capsys):
    driver = DriverSide(tmp_path)
    driver.problem.rename(tmp_path / "moved-away.py")  # the node must never read the driver's file
    seen: dict[int, list] = {}
    logged: dict[int, list[str]] = {}

    def look(turn: int) -> None:
        seen.setdefault(turn, driver.attempts())
        logged.setdefault(turn, driver.agent_log())

    scripts = {A: [submit(candidate(B)), submit(candidate(A))]}  # another problem's kernel, then the right one
    with Watching(scripts, look) as server:
        row = run_remote_problem(driver.spec(server), driver.channel)
    lines = driver.agent_log()
    assert row["status"] == "finished" and row["correct"] and row["verdict"] == "ok", row.get("error") or row
    assert row["schema"] == ROW_SCHEMA == 5 and row["executor"] == "ray" and row["node"] == "node-7"
    assert row["attempts"] == 2 and row["best_attempt"] == 2 and row["resumed"] is False
    assert row["workspace"] == str(driver.ws / A) and row["path"] == str(driver.problem.resolve())
    # attempt 1 was in the driver's workspace when the model was asked for its second kernel
    assert seen[1] == [] and [a.number for a in seen[2]] == [1]
    with Workspace(driver.ws).open_existing(A) as repo:
        assert_consistent(repo)  # numbers 1..n, the best rule replayed, one commit per attempt on main
        attempts = repo.attempts()
        assert [a.number for a in attempts] == [1, 2] and attempts[1].verdict.value == "ok"
        assert {a.run_id for a in attempts} == {row["run_id"]} and {a.model for a in attempts} == {"scripted"}
        # what each attempt cost came through the channel: its tokens, and no price for this model
        assert sum(a.tokens for a in attempts) == row["tokens"] and row["cost_usd"] is None and row["price"] is None
        assert [a.cost_cell() for a in attempts] == ["no price", "no price"]
        assert repo.best().number == 2 and repo.best_path.read_text() == candidate(A)
        assert [t.run_id for t in repo.trajectories()] == [row["run_id"]]
        assert repo.reference_source().encode() == driver.original  # keyed by the bytes the service read
        # the same trailers a local commit of these attempts gets
        local = Workspace(tmp_path / "local").open_problem(tmp_path / "moved-away.py")
        with local:
            for a in attempts:
                mine = local.commit_attempt(repo.source(a), repo.record(a), model=a.model, run_id=a.run_id,
                                            spend={"tokens": a.tokens, "cost_usd": a.cost_usd,
                                                   "run_cost_usd": a.run_cost_usd},
                                            lineage=None if a.lineage is None else (a.lineage, a.parent_attempt))
                assert trailers(local.path, mine.sha) == trailers(repo.path, a.sha)
    pointer = json.loads((driver.ws / ".ratchet" / f"{A}.run.json").read_text())
    assert pointer["run_id"] == row["run_id"] and pointer["finished"] is True
    with sqlite3.connect(driver.ws / ".ratchet" / f"{A}.sqlite") as db:
        assert db.execute("select count(*) from checkpoints where thread_id = ?", (row["run_id"],)).fetchone()[0] > 3
    assert driver.log == []  # no op failed
    # the run's log lines are in the driver's logs/<problem>.log, as a local run's would be, and each was
    # there while the run went on: attempt 1's line before the model was asked for its second kernel
    assert lines[0].startswith(f"run {row['run_id']}: ") and lines[0].endswith(f"with scripted, workspace {driver.ws / A}")
    assert lines[1:] == ["[1/3] attempt 1: incorrect; no correct kernel yet",
                         "[2/3] attempt 2: ok; run's best: attempt 2 (not timed)  new best",
                         "timing is unavailable on cpu: stopping at the first correct kernel; run on a GPU to optimize for speed"]
    assert logged[1] == lines[:1] and logged[2] == lines[:2]
    # and the node keeps its own copy on stderr, each line prefixed with the problem
    node = [line for line in capsys.readouterr().err.splitlines() if line.startswith(f"[{A}] ")]
    assert node == [f"[{A}] {line}" for line in lines]


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
                     ("log", {"lines": ["[1/3] a fenced run's line"]}),
                     ("attempts", {}), ("release", {})):
        with pytest.raises(Fenced, match=f"problem {A}: {op} with lease {stale} refused"):
            driver.call(stale, op, **args)
    # nothing of the fenced writes: main, the trajectories ref, the checkpoints, the pointer
    assert git(repo_path, "rev-parse", "main").stdout == head
    assert git(repo_path, "rev-parse", "-q", "--verify", TRAJECTORIES, check=False).returncode != 0
    assert not (driver.ws / ".ratchet" / f"{A}.sqlite").exists()
    assert not (driver.ws / ".ratchet" / f"{A}.run.json").exists()
    assert not (driver.logs / f"{A}.log").exists()
    # the holder of the lease writes, its log lines too (appended as they are); log lines are strings
    driver.call(second["token"], "log", lines=["one", "two"])
    driver.call(second["token"], "log", lines=["three"])
    assert driver.agent_log() == ["one", "two", "three"]
    with pytest.raises(ServiceError, match=f"^problem {A}: log failed: ValueError: log lines are a list of strings"):
        driver.call(second["token"], "log", lines="four")
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


def test_a_run_that_lost_its_lease_stops_and_writes_nothing_more(remote_env, tmp_path, capsys):
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
    # its log lines reached the driver while it held the lease, and none after: the line saying it was
    # refused stays on the node's stderr, refused by the driver like its writes
    lines = driver.agent_log()
    assert lines[1:] == ["[1/3] attempt 1: incorrect; no correct kernel yet"], lines
    node = capsys.readouterr().err
    assert f"[{A}] batch: problem {A}: " in node and f"with lease s1:1 refused (lease {taken[0]} was taken since)" in node
    assert not any("refused" in line for line in lines)
    assert "did not reach the driver" not in node  # Fenced is no failure to report


def test_a_service_without_a_logs_directory_logs_agent_lines_as_its_own(tmp_path):
    problem = tmp_path / f"{A}.py"
    shutil.copy(SUITE / f"{A}.py", problem)
    said: list[str] = []
    service = WorkspaceService(tmp_path / "ws", {A: problem}, "s1", log=said.append)
    token = service.handle(Request(A, None, "acquire", {"since": None}))["token"]
    service.handle(Request(A, token, "log", {"lines": ["[1/3] attempt 1: ok"]}))
    assert said == [f"{A}: [1/3] attempt 1: ok"]
    service.close()


def test_a_log_line_that_cannot_reach_the_driver_fails_nothing(remote_env, tmp_path, capsys):
    logs = tmp_path / "run" / "logs"
    logs.parent.mkdir()
    logs.write_text("not a directory")  # every log request fails on the driver (NotADirectoryError)
    driver = DriverSide(tmp_path, logs=logs)
    with SuiteLoopback({A: [submit(candidate(A))]}, lifetime_s=110) as server:
        row = run_remote_problem(driver.spec(server), driver.channel)
    assert row["status"] == "finished" and row["correct"] and row["attempts"] == 1, row
    assert [a.verdict.value for a in driver.attempts()] == ["ok"]
    node = capsys.readouterr().err.splitlines()
    said = [line for line in node if "did not reach the driver" in line]
    assert len(said) == 1, said  # said once, though every line failed
    assert said[0].startswith(f"[{A}] batch: a log line did not reach the driver's logs/{A}.log (ServiceError: "
                              f"problem {A}: log failed: NotADirectoryError: [Errno 20] Not a directory: ")
    assert said[0].endswith("every line stays on this node's stderr")
    assert f"[{A}] [1/3] attempt 1: ok; run's best: attempt 1 (not timed)  new best" in node  # the node's copy
    assert any("NotADirectoryError" in line for line in driver.log)  # the driver logged each failure in full


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


def test_report_reads_rows_of_every_schema(tmp_path, capsys):
    run = tmp_path / "run"
    run.mkdir()
    old = {"schema": 1, "problem": "1_old", "status": "finished", "verdict": "ok", "correct": True,
           "timing_measured": False, "speedup_vs_eager": None, "speedup_vs_compile": None, "roofline_fraction": None,
           "attempts": 2, "tokens": 10, "device_s": 1.0, "device": "cpu"}
    new = crashed_row({"key": "2_new", "problem": "/x/2_new.py", "device": "cpu", "executor": "ray", "node": "n1"},
                      "node died", 3.0)
    assert new["schema"] == ROW_SCHEMA == 5 and new["executor"] == "ray" and new["node"] == "n1"
    assert new["trials"] is None and new["attempts_to_correct"] is None  # schema 3's fields, in every row
    log = RunLog(run / "results.jsonl")
    log.append(old)
    log.append(new)
    (run / "run.json").write_text(json.dumps({"batch": 1, "suite": "/x", "problems": ["1_old", "2_new"],
                                              "settings": {"model": "m"}, "device": "cpu"}))
    assert main(["report", str(run), "--json"]) == 0
    out = capsys.readouterr().out
    assert "1_old" in out and "2_new" in out
