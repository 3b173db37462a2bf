"""One workspace, one precision (docs/precision.md): the trailer, the refusal of an attempt or a
run of the other precision, and what binds nothing (records before schema 6, evaluator faults)."""
from __future__ import annotations

from pathlib import Path

import pytest

from agent.cli import main
from agent.workspace.attempt import precision_conflict
from agent.workspace.root import Workspace, WorkspaceError
from helpers_workspace import git, timed
from helpers_workspace_checks import assert_consistent, commit
from tools.record import Result, Verdict


def test_an_attempt_of_the_other_precision_is_refused_and_nothing_moves(ws: Workspace, problem: Path) -> None:
    with ws.open_problem(problem) as repo:
        first = commit(repo, timed(Verdict.OK, 1.0, precision="fp32"), "1")
        assert first.precision == "fp32" and first.became_best
        assert "Ratchet-Precision: fp32" in git(repo.path, "log", "-1", "--format=%B").stdout
        assert repo.attempts()[-1].precision == "fp32"  # parsed back from the trailer
        with pytest.raises(WorkspaceError, match="it holds fp32 attempts.*a workspace of its own"):
            commit(repo, timed(Verdict.OK, 0.2, precision="tf32"), "2")  # 5x faster against TF32 baselines
        assert [a.number for a in repo.attempts()] == [1] and repo.best().number == 1
        fault = commit(repo, Result(verdict=Verdict.ERROR, message="the reference died twice"), "3")
        assert fault.precision == "" and fault.number == 2  # an evaluator fault's record carries none: binds nothing
        assert commit(repo, timed(Verdict.OK, 0.5, precision="fp32"), "4").became_best
        assert_consistent(repo)


def test_attempts_from_before_the_setting_bind_nothing(ws: Workspace, problem: Path) -> None:
    with ws.open_problem(problem) as repo:
        old = commit(repo, timed(Verdict.OK, 1.0), "1")  # a schema-5 era record: no precision
        assert old.precision == "" and precision_conflict(repo.attempts(), "tf32") is None
        assert commit(repo, timed(Verdict.OK, 0.5, precision="tf32"), "2").became_best
        assert "tf32 attempts" in (precision_conflict(repo.attempts(), "fp32") or "")


def test_a_run_of_the_other_precision_is_refused_before_its_first_attempt(ws: Workspace, problem: Path,
                                                                          capsys) -> None:
    with ws.open_problem(problem) as repo:
        commit(repo, timed(Verdict.OK, 1.0, precision="fp32"), "1")
    code = main(["optimize", str(problem), "--model", "builtin", "--workspace", str(ws.root), "--precision", "tf32",
                 "--device", "cpu"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and "it holds fp32 attempts" in err[0] and "--workspace DIR" in err[0], err
    with ws.open_problem(problem) as repo:
        assert [a.number for a in repo.attempts()] == [1]
