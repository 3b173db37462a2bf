"""Result records across schema versions, and the verdict `error` (an evaluator fault) in the
workspace: records of schema 1 (written before `error` and `environment["sandbox"]` existed) are
still read; an error attempt is committed, parsed back from its trailers, and never the best."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from agent.cli import main
from agent.workspace.root import Workspace
from helpers_workspace import timed, write_problem
from helpers_workspace_checks import SRC, assert_consistent, commit
from tools.record import READABLE_VERSIONS, SCHEMA_VERSION, Result, Verdict

# A record as schema 1 wrote it (ratchet eval --json before the sandbox entry and verdict error).
SCHEMA_1 = {
    "verdict": "incorrect", "message": "Output 0 differs at [3]: got 1.0, expected 2.0 (max abs error 1).",
    "schema_version": 1, "problem": "/x/19_ReLU.py", "problem_hash": "ab" * 32, "source_hash": "cd" * 32,
    "checks": [{"name": "guard", "passed": True, "detail": ""}, {"name": "build", "passed": True, "detail": ""},
               {"name": "trial-1", "passed": False, "detail": "max abs error 1"}],
    "errors": {"max_abs": 1.0, "max_rel": 0.5, "norm_rel": 0.1}, "trials": 0,
    "candidate_time": {"measured": False, "median_ms": None, "ci_low_ms": None, "ci_high_ms": None, "samples": 0,
                       "note": "not measured"},
    "eager_time": {"measured": False, "median_ms": None, "ci_low_ms": None, "ci_high_ms": None, "samples": 0,
                   "note": "not measured"},
    "compile_time": {"measured": False, "median_ms": None, "ci_low_ms": None, "ci_high_ms": None, "samples": 0,
                     "note": "not measured"},
    "speedup_vs_eager": None, "speedup_vs_compile": None,
    "roofline": {"measured": False, "bytes_moved": 8192, "flops": 1024, "floor_ms": None, "achieved_fraction": None,
                 "note": "not measured"},
    "own_kernel_share": None, "kernel_launches": 1, "torch_ops": [], "phases": {"guard": 0.01, "total": 1.5},
    "environment": {"torch": "2.13.0", "triton": "3.7.0", "python": "3.11.9", "network_isolated": True},
}


def test_schema_1_records_are_still_read():
    assert SCHEMA_VERSION == 9 and READABLE_VERSIONS == (1, 2, 3, 4, 5, 6, 7, 8, 9)
    result = Result.from_dict(json.loads(json.dumps(SCHEMA_1)))
    assert result.verdict is Verdict.INCORRECT and result.schema_version == 1  # it says what wrote it
    assert result.errors.max_abs == 1.0 and result.checks[2].name == "trial-1" and result.roofline.bytes_moved == 8192
    assert "sandbox" not in result.environment
    assert result.to_dict() == SCHEMA_1  # read and written back unchanged
    assert result.distributions == [] and result.dropped == {}  # schema 3's fields, absent before
    assert result.generalizes is None and result.heldout == []  # schema 4's
    assert result.roofline.bound is None and "bound" not in result.to_dict()["roofline"]  # schema 5's, nested
    assert result.precision is None and "precision" not in result.to_dict()  # schema 6's
    assert "float64" not in result.to_dict()["errors"]  # schema 7's, nested
    assert "eager_quiet" not in result.to_dict()  # schema 8's
    latest = Result(verdict=Verdict.ERROR, message="the evaluator failed", precision="tf32").to_dict()
    assert latest["schema_version"] == 9 and latest["errors"]["float64"] is None and latest["eager_quiet"]["measured"] is False
    assert Result.from_dict(latest).to_dict() == latest
    schema_8 = {**latest, "schema_version": 8}  # 9 added no field, only the half precisions' names
    assert Result.from_dict(schema_8).to_dict() == schema_8
    schema_7 = {**{k: v for k, v in latest.items() if k != "eager_quiet"}, "schema_version": 7}
    assert Result.from_dict(schema_7).to_dict() == schema_7  # a schema 7 record is written back as it was
    current = {**{k: v for k, v in schema_7.items() if k not in ("library", "library_share")}, "schema_version": 6,
               "errors": {k: v for k, v in latest["errors"].items() if not k.startswith("float64")}}
    assert Result.from_dict(current).to_dict() == current  # a schema 6 record is written back as it was
    assert current["schema_version"] == 6 and Result.from_dict(current).precision == "tf32"
    assert current["roofline"]["bound"] is None
    schema_5 = {k: v for k, v in current.items() if k != "precision"} | {"schema_version": 5}
    assert Result.from_dict(schema_5).to_dict() == schema_5  # a schema 5 record is written back as it was
    schema_4 = {**schema_5, "schema_version": 4, "roofline": {k: v for k, v in current["roofline"].items() if k != "bound"}}
    assert Result.from_dict(schema_4).to_dict() == schema_4  # a schema 4 record is written back as it was
    assert current["distributions"] == [] and current["dropped"] == {} and current["heldout"] == []
    schema_3 = {**schema_4, "schema_version": 3}
    del schema_3["generalizes"], schema_3["heldout"]
    assert Result.from_dict(schema_3).to_dict() == schema_3  # a schema 3 record is written back as it was
    for version in (None, 0, 10, "2"):
        with pytest.raises(ValueError, match="schema_version"):
            Result.from_dict({**SCHEMA_1, "schema_version": version})


def test_an_old_attempt_and_an_error_attempt_in_the_workspace(tmp_path: Path, capsys) -> None:
    ws = Workspace(tmp_path / "ws", lock_timeout=30)
    problem = write_problem(tmp_path / "problems" / "19_ReLU.py")
    fault = Result(verdict=Verdict.ERROR, message="ratchet's evaluator failed (ReferenceLost: the reference died twice)")
    with ws.open_problem(problem) as repo:
        old = repo.commit_attempt(SRC.format(1), SCHEMA_1, model="m", run_id="r1")  # a schema 1 record, as a dict
        err = commit(repo, fault)
        good = commit(repo, timed(Verdict.OK, 0.5))
        assert repo.record(old) == SCHEMA_1
        assert err.verdict is Verdict.ERROR and not err.became_best and good.became_best
        parsed = {a.number: a for a in repo.attempts()}
        assert parsed[err.number].verdict is Verdict.ERROR and parsed[old.number].verdict is Verdict.INCORRECT
        assert parsed[err.number].subject == f"attempt {err.number}: error (evaluator fault, not judged)"
        assert repo.record(parsed[err.number])["verdict"] == "error"
        assert_consistent(repo)
    assert main(["log", str(problem), "--workspace", str(ws.root), "--json"]) == 0
    verdicts = [json.loads(line)["verdict"] for line in capsys.readouterr().out.splitlines()]
    assert verdicts == ["incorrect", "error", "ok"]
