"""The git workspace: commits, trailers, the best rule, crash recovery, locking, refusals, the CLI."""
from __future__ import annotations

import hashlib
import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from agent.cli import main
from agent.workspace import (BEST, MAIN, DirtyWorkspace, ForeignRepository, ProblemRepo, Workspace, WorkspaceBusy,
                             repo_name)
from agent.workspace_attempt import Attempt, beats
from agent.workspace_lock import FileLock
from helpers_workspace import git, make_result, timed, untimed, write_problem, writer_command
from tools.record import Check, Errors, Result, Verdict

SRC = "import torch\n\nclass ModelNew(torch.nn.Module):\n    pass  # {}\n"


@pytest.fixture
def problem(tmp_path: Path) -> Path:
    return write_problem(tmp_path / "problems" / "19_ReLU.py")


@pytest.fixture
def ws(tmp_path: Path) -> Workspace:
    return Workspace(tmp_path / "ws", lock_timeout=30)


def commit(repo: ProblemRepo, result: Result, tag: str = "") -> Attempt:
    return repo.commit_attempt(SRC.format(tag), result, model="test-model", run_id="run-1")


def assert_consistent(repo: ProblemRepo) -> None:
    """Invariants after anything: fsck clean, tree clean, numbers 1..n, best = replay of the rule."""
    fsck = git(repo.path, "fsck", "--full", "--strict", check=False)
    assert fsck.returncode == 0 and "error" not in fsck.stderr + fsck.stdout, fsck.stderr
    assert git(repo.path, "status", "--porcelain", "--untracked-files=all").stdout == ""
    assert not (repo.path / ".git" / "ratchet-journal.json").exists()
    attempts = repo.attempts()
    assert [a.number for a in attempts] == list(range(1, len(attempts) + 1))
    best = None
    for a in attempts:
        assert hashlib.sha256(repo.source(a).encode()).hexdigest() == a.source_sha256
        assert repo.record(a)["verdict"] == a.verdict.value
        assert a.became_best == beats(a, best)
        best = a if a.became_best else best
    assert (repo.best() or None) == best
    if best is None:
        assert git(repo.path, "rev-parse", "-q", "--verify", BEST, check=False).stdout == ""
        assert not repo.best_path.exists()
    else:
        assert git(repo.path, "rev-parse", BEST).stdout.strip() == best.sha
        assert git(repo.path, "merge-base", "--is-ancestor", BEST, MAIN, check=False).returncode == 0
        assert repo.best_path.read_text() == repo.source(best)
        assert json.loads(repo.best_result_path.read_text()) == repo.record(best)


# -- creation and layout ----------------------------------------------------------------------

def test_first_use_creates_repo_with_reference_commit(ws: Workspace, problem: Path) -> None:
    with ws.open_problem(problem) as repo:
        assert repo.path == (ws.root / "19_ReLU").absolute()
        assert (repo.path / "reference.py").read_bytes() == problem.read_bytes()
        marker = json.loads((repo.path / "ratchet.json").read_text())
        assert marker["reference_sha256"] == hashlib.sha256(problem.read_bytes()).hexdigest()
        assert git(repo.path, "symbolic-ref", "HEAD").stdout.strip() == MAIN
        assert git(repo.path, "log", "--format=%s").stdout.splitlines() == ["reference: 19_ReLU.py"]
        assert repo.attempts() == [] and repo.best() is None
        assert_consistent(repo)
    with ws.open_problem(problem) as again:  # second use opens the same repository
        assert again.path == repo.path
    assert ws.problems() == ["19_ReLU"]


def test_root_from_argument_env_or_default(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("RATCHET_WORKSPACE", raising=False)
    assert Workspace().root == Path("workspaces")
    monkeypatch.setenv("RATCHET_WORKSPACE", "/env/ws")
    assert Workspace().root == Path("/env/ws") and Workspace("cli").root == Path("cli")


def test_repo_names_are_safe() -> None:
    assert repo_name("a/b/1_Conv 2D+ReLU (v2).py") == "1_Conv_2D_ReLU_v2_"
    assert repo_name(".hidden.py") == "hidden"
    assert repo_name("-rf.py") == "rf"
    assert repo_name("$$$.py") == "problem"


def test_other_version_of_same_file_gets_its_own_repo(ws: Workspace, tmp_path: Path) -> None:
    first = write_problem(tmp_path / "a" / "relu.py", scale=2)
    second = write_problem(tmp_path / "b" / "relu.py", scale=3)
    with ws.open_problem(first) as a, ws.open_problem(second) as b:
        commit(a, untimed())
        digest = hashlib.sha256(second.read_bytes()).hexdigest()
        assert a.name == "relu" and b.name == f"relu-{digest[:8]}"
        assert b.attempts() == []
    with ws.open_existing(str(second)) as again:
        assert again.name == b.name


# -- commits and trailers ---------------------------------------------------------------------

def test_attempt_commit_holds_source_record_extras_and_trailers(ws: Workspace, problem: Path) -> None:
    result = timed(Verdict.OK, 0.412, 0.409, 0.415, trials=5, checks=[Check("trial 1", True)], errors=Errors(1e-6, 2e-5, 3e-7))
    with ws.open_problem(problem) as repo:
        att = repo.commit_attempt(SRC.format(1), result, model="qwen/coder:32b", run_id="r-7",
                                  extra_files={"trajectory.json": "[1, 2]\n", "replies/1.txt": "hello\n"})
        assert (att.number, att.became_best, att.is_best) == (1, True, True)
        files = git(repo.path, "show", "--name-only", "--format=", att.sha).stdout.split()
        assert sorted(files) == ["best/candidate.py", "best/result.json", "candidate.py", "replies/1.txt",
                                 "result.json", "trajectory.json"]
        assert git(repo.path, "show", f"{att.sha}:candidate.py").stdout == SRC.format(1)
        assert repo.record(att) == result.to_dict()
        assert Result.from_dict(repo.record(att)) == result
        subject = git(repo.path, "log", "--oneline", "-1", "--format=%s").stdout.strip()
        assert subject == "attempt 1: ok, 2.43x vs eager, 0.412 ms, new best"
        body = git(repo.path, "log", "-1", "--format=%B").stdout
        assert "Ratchet-Verdict: ok\n" in body and "Ratchet-Attempt: 1\n" in body

        parsed = repo.attempt(1)
        assert parsed == Attempt(**{**att.__dict__, "committed_at": parsed.committed_at})
        t = result.candidate_time
        assert (parsed.verdict, parsed.speedup_vs_eager, parsed.speedup_vs_compile) == \
            (result.verdict, result.speedup_vs_eager, result.speedup_vs_compile)
        assert (parsed.median_ms, parsed.ci_low_ms, parsed.ci_high_ms, parsed.timing_measured) == \
            (t.median_ms, t.ci_low_ms, t.ci_high_ms, True)
        assert parsed.roofline_fraction == result.roofline.achieved_fraction
        assert (parsed.model, parsed.run_id) == ("qwen/coder:32b", "r-7")


@pytest.mark.parametrize("seed", range(3))
def test_trailers_parse_back_exactly(ws: Workspace, problem: Path, seed: int) -> None:
    rng = random.Random(seed)
    with ws.open_problem(problem) as repo:
        results = [make_result(rng) for _ in range(6)]
        for r in results:
            commit(repo, r)
        for r, a in zip(results, repo.attempts()):
            assert a.verdict == r.verdict and a.timing_measured == r.candidate_time.measured
            assert a.speedup_vs_eager == r.speedup_vs_eager and a.speedup_vs_compile == r.speedup_vs_compile
            assert (a.median_ms, a.ci_low_ms, a.ci_high_ms) == \
                (r.candidate_time.median_ms, r.candidate_time.ci_low_ms, r.candidate_time.ci_high_ms)
            assert a.roofline_fraction == r.roofline.achieved_fraction
            assert Result.from_dict(repo.record(a)) == r


def test_failed_attempts_are_committed_with_na(ws: Workspace, problem: Path) -> None:
    with ws.open_problem(problem) as repo:
        att = commit(repo, Result(verdict=Verdict.COMPILE_ERROR, message="--- nvcc: error\nmore"))
        body = git(repo.path, "log", "-1", "--format=%B").stdout
        assert "Ratchet-Speedup-Eager: n/a" in body and "Ratchet-Timing: not-measured" in body
        assert "Ratchet-Verdict: compile_error" in body
        parsed = repo.attempt(1)
        assert parsed.verdict is Verdict.COMPILE_ERROR and parsed.median_ms is None and not parsed.is_best
        assert att.subject == "attempt 1: compile_error" and repo.best() is None
        assert_consistent(repo)


def test_extra_file_names_are_checked(ws: Workspace, problem: Path) -> None:
    with ws.open_problem(problem) as repo:
        for bad in ("../x", "/etc/x", "candidate.py", "result.json", "best/candidate.py", ".git/config", "a//b", ""):
            with pytest.raises(ValueError):
                repo.commit_attempt("x", untimed(), model="m", run_id="r", extra_files={bad: "x"})
        assert repo.attempts() == []


def test_save_trajectory_commits_without_an_attempt(ws: Workspace, problem: Path) -> None:
    with ws.open_problem(problem) as repo:
        commit(repo, untimed())
        sha = repo.save_trajectory('{"steps": 1}\n')
        assert sha and (repo.path / "trajectory.json").read_text() == '{"steps": 1}\n'
        assert repo.save_trajectory('{"steps": 1}\n') is None  # unchanged: no commit
        assert commit(repo, untimed()).number == 2
        assert (repo.path / "trajectory.json").exists()  # extra files stay until overwritten
        assert_consistent(repo)


# -- the best rule ----------------------------------------------------------------------------

def _att(verdict: Verdict = Verdict.OK, median: float | None = None, low=None, high=None) -> Attempt:
    r = untimed(verdict) if median is None else timed(verdict, median, low, high)
    return Attempt.from_result(1, r, model="m", run_id="r", source="")


@pytest.mark.parametrize("new, incumbent, wins", [
    (_att(), None, True),                                         # first correct: best even untimed
    (_att(median=1.0), None, True),
    (_att(Verdict.INCORRECT, 0.01), None, False),                 # incorrect never best
    (_att(Verdict.REJECTED, 0.01), _att(median=1.0), False),      # rejected never best
    (_att(median=0.5), _att(median=1.0), True),                   # intervals apart
    (_att(median=1.0), _att(median=1.0), False),                  # tie keeps incumbent
    (_att(median=0.97), _att(median=1.0), False),                 # overlap (noise) keeps incumbent
    (_att(median=0.9, low=0.89, high=0.95), _att(median=1.0, low=0.95, high=1.1), False),  # touching
    (_att(median=0.9, low=0.89, high=0.9499), _att(median=1.0, low=0.95, high=1.1), True),
    (_att(median=0.5), _att(), True),                             # timed beats untimed
    (_att(), _att(median=9.0), False),                            # untimed never beats
    (_att(), _att(), False),                                      # two untimed: keep incumbent
    (_att(median=float("nan"), low=float("nan"), high=float("nan")), _att(median=1.0), False),
])
def test_best_rule(new: Attempt, incumbent: Attempt | None, wins: bool) -> None:
    assert beats(new, incumbent) is wins


def test_best_moves_only_on_a_clear_win(ws: Workspace, problem: Path) -> None:
    steps = [  # (result, becomes best)
        (Result(verdict=Verdict.COMPILE_ERROR, message="syntax"), False),
        (untimed(Verdict.INCORRECT), False),
        (untimed(), True),
        (untimed(), False),
        (timed(Verdict.OK, 1.0), True),
        (timed(Verdict.OK, 0.99), False),
        (timed(Verdict.OK, 1.0), False),
        (untimed(), False),
        (timed(Verdict.INCORRECT, 0.1), False),
        (timed(Verdict.REJECTED, 0.1), False),
        (timed(Verdict.OK, 0.5), True),
        (Result(verdict=Verdict.CRASHED, message="segfault"), False),
    ]
    with ws.open_problem(problem) as repo:
        best_number = None
        for i, (result, wins) in enumerate(steps, start=1):
            att = commit(repo, result, tag=str(i))
            assert (att.number, att.became_best) == (i, wins)
            best_number = i if wins else best_number
            assert repo.best().number == best_number if best_number else repo.best() is None
        assert repo.best_path == repo.path / "best" / "candidate.py"
        assert repo.best_path.read_text() == SRC.format(best_number)
        assert [a.number for a in repo.attempts() if a.is_best] == [best_number]
        assert_consistent(repo)


# -- refusals ---------------------------------------------------------------------------------

def test_dirty_workspace_is_refused(ws: Workspace, problem: Path) -> None:
    with ws.open_problem(problem) as repo:
        commit(repo, timed(Verdict.OK, 1.0))
        (repo.path / "notes.txt").write_text("mine")  # untracked and out of ratchet's way: fine
        commit(repo, untimed())
        assert "notes.txt" not in git(repo.path, "ls-files").stdout
        (repo.path / "trajectory.json").write_text("mine too")  # untracked where ratchet would write
        with pytest.raises(DirtyWorkspace, match="untracked trajectory.json"):
            repo.commit_attempt("x", untimed(), model="m", run_id="r", extra_files={"trajectory.json": "[]"})
        (repo.path / "trajectory.json").unlink()
        (repo.path / "best" / "candidate.py").write_text("# my edit\n")
    with pytest.raises(DirtyWorkspace, match="best/candidate.py") as err:
        ws.open_problem(problem)
    assert "\n" not in str(err.value)
    assert (repo.path / "best" / "candidate.py").read_text() == "# my edit\n"  # never reset


def test_checked_out_other_branch_is_refused(ws: Workspace, problem: Path) -> None:
    with ws.open_problem(problem) as repo:
        commit(repo, untimed())
    git(repo.path, "checkout", "-q", "best")
    with pytest.raises(DirtyWorkspace, match="not main"):
        ws.open_problem(problem)


def test_foreign_directories_are_refused(ws: Workspace, problem: Path) -> None:
    target = ws.root / "19_ReLU"
    target.mkdir(parents=True)
    (target / "mine.txt").write_text("user data")
    with pytest.raises(ForeignRepository, match="not a ratchet workspace"):
        ws.open_problem(problem)
    git(target, "init", "-q")
    git(target, "-c", "user.name=u", "-c", "user.email=u@x", "commit", "-q", "--allow-empty", "-m", "mine")
    with pytest.raises(ForeignRepository):
        ws.open_problem(problem)
    assert sorted(p.name for p in target.iterdir()) == [".git", "mine.txt"]
    (ws.root / "other").write_text("a file where a repository would go")
    with pytest.raises(ForeignRepository):
        ws.open_problem(write_problem(problem.parent / "other.py"))
    assert main(["log", "19_ReLU", "--workspace", str(ws.root)]) == 2


# -- locking ----------------------------------------------------------------------------------

def test_busy_lock_gives_a_clear_message(ws: Workspace, problem: Path) -> None:
    with ws.open_problem(problem) as repo:
        commit(repo, untimed())
    impatient = Workspace(ws.root, lock_timeout=0.2)
    with FileLock(repo.path / ".git" / "ratchet.lock"):
        with pytest.raises(WorkspaceBusy) as err:
            impatient.open_problem(problem)
    assert f"pid {os.getpid()}" in str(err.value) and "busy" in str(err.value)


def test_git_lock_not_left_by_ratchet_is_refused(ws: Workspace, problem: Path) -> None:
    with ws.open_problem(problem) as repo:
        commit(repo, untimed())
    lock = repo.path / ".git" / "index.lock"
    lock.write_text("")
    os.utime(lock, (time.time() - 60, time.time() - 60))
    with pytest.raises(WorkspaceBusy, match="index.lock"):
        ws.open_problem(problem)
    assert lock.exists()


def _run_writers(root: Path, jobs: list[tuple[Path, int]], count: int) -> list[list[tuple[int, str, str]]]:
    procs = [subprocess.Popen(writer_command(root, p, count=count, seed=seed), stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for p, seed in jobs]
    outs = []
    for proc in procs:
        out, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, err
        outs.append([(int(n), sha, best) for n, sha, best in (line.split() for line in out.splitlines())])
    return outs


def test_concurrent_writers_on_one_problem_serialize(ws: Workspace, problem: Path) -> None:
    outs = _run_writers(ws.root, [(problem, seed) for seed in range(3)], count=5)
    for out in outs:
        numbers = [n for n, _, _ in out]
        assert numbers == sorted(numbers) and len(numbers) == 5
    assert sorted(n for out in outs for n, _, _ in out) == list(range(1, 16))
    assert ws.problems() == ["19_ReLU"]  # the creation race made one repository
    assert not list(ws.root.glob(".ratchet-new-*"))
    with ws.open_problem(problem) as repo:
        assert_consistent(repo)


def test_writers_on_different_problems_run_in_parallel(ws: Workspace, tmp_path: Path) -> None:
    problems = [write_problem(tmp_path / f"p{i}" / f"prob_{i}.py", scale=i) for i in range(3)]
    _run_writers(ws.root, [(p, i) for i, p in enumerate(problems)], count=4)
    for p in problems:
        with ws.open_problem(p) as repo:
            assert [a.number for a in repo.attempts()] == [1, 2, 3, 4]
            assert_consistent(repo)


# -- crashes ----------------------------------------------------------------------------------

@pytest.mark.parametrize("point, landed", [
    ("after_journal", False), ("before_main", False), ("after_main", True), ("after_best", True),
    ("mid_worktree", True), ("before_unjournal", True),
])
def test_writer_killed_at_each_step_recovers(ws: Workspace, problem: Path, point: str, landed: bool) -> None:
    with ws.open_problem(problem) as repo:
        commit(repo, timed(Verdict.OK, 2.0))
    env = {**os.environ, "RATCHET_WORKSPACE_CRASH_AT": point}
    proc = subprocess.run(writer_command(ws.root, problem, count=1, seed=1, kind="ok"), env=env,
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == -signal.SIGKILL, proc.stderr
    if point == "before_main":  # a git child killed mid-update-ref would leave these behind
        for name in ("index.lock", "refs/heads/main.lock"):
            (repo.path / ".git" / name).write_text("")
            os.utime(repo.path / ".git" / name, (time.time() - 60, time.time() - 60))
    with ws.open_problem(problem) as repo:
        assert len(repo.attempts()) == (2 if landed else 1)
        assert_consistent(repo)
        assert repo.best().number == (2 if landed else 1)  # the killed attempt (0.1-2 ms) was a new best
        assert commit(repo, untimed()).number == (3 if landed else 2)
        assert_consistent(repo)


def test_creator_killed_before_rename_leaves_nothing_in_the_way(ws: Workspace, problem: Path) -> None:
    env = {**os.environ, "RATCHET_WORKSPACE_CRASH_AT": "before_rename"}
    proc = subprocess.run(writer_command(ws.root, problem, count=1, seed=1), env=env, capture_output=True, timeout=60)
    assert proc.returncode == -signal.SIGKILL
    assert ws.problems() == []
    [leftover] = ws.root.glob(".ratchet-new-*")
    os.utime(leftover, (time.time() - 60, time.time() - 60))
    with ws.open_problem(problem) as repo:
        assert commit(repo, untimed()).number == 1
        assert_consistent(repo)
    assert not leftover.exists()  # a dead creator's half-built repository is swept away


def test_writer_killed_at_random_moments_then_continues(ws: Workspace, problem: Path) -> None:
    rng = random.Random(1234)
    for round_ in range(4):
        proc = subprocess.Popen(writer_command(ws.root, problem, count=0, seed=round_), stdout=subprocess.PIPE,
                                stderr=subprocess.DEVNULL, text=True, start_new_session=True)
        for _ in range(1 + round_ % 3):  # let it commit a few first, then kill it mid-flight
            assert proc.stdout.readline()
        time.sleep(rng.uniform(0.0, 0.06))
        if round_ % 2:  # the writer alone: its git children finish as orphans
            os.kill(proc.pid, signal.SIGKILL)
        else:  # the writer and its git children: their lock files stay behind
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        proc.stdout.close()
    with ws.open_problem(problem) as repo:
        before = len(repo.attempts())
        assert_consistent(repo)
        assert commit(repo, timed(Verdict.OK, 0.001)).number == before + 1
        assert repo.best().number == before + 1
        assert_consistent(repo)


# -- the commands -----------------------------------------------------------------------------

@pytest.fixture
def history(ws: Workspace, problem: Path) -> Workspace:
    with ws.open_problem(problem) as repo:
        commit(repo, Result(verdict=Verdict.COMPILE_ERROR, message="nvcc failed"), "1")
        commit(repo, timed(Verdict.OK, 1.0), "2")
        commit(repo, timed(Verdict.OK, 0.5), "3")
        commit(repo, timed(Verdict.OK, 0.49), "4")
    return ws


def test_cli_log_table_marks_best(history: Workspace, problem: Path, capsys) -> None:
    assert main(["log", str(problem), "--workspace", str(history.root)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split()[:3] == ["#", "verdict", "vs"]
    rows = {line.split()[1 if line.startswith("*") else 0]: line for line in lines[1:5]}
    assert rows["3"].startswith("*") and not any(rows[n].startswith("*") for n in "124")
    assert "compile_error" in rows["1"] and "0.500" in rows["3"] and "2.00x" in rows["3"]
    assert "best: attempt 3" in lines[-1]


def test_cli_log_json_by_name_and_env(history: Workspace, monkeypatch, capsys) -> None:
    monkeypatch.setenv("RATCHET_WORKSPACE", str(history.root))
    assert main(["log", "19_ReLU", "--json"]) == 0
    records = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [r["number"] for r in records] == [1, 2, 3, 4]
    assert [r["is_best"] for r in records] == [False, False, True, False]
    assert records[2]["verdict"] == "ok" and records[2]["median_ms"] == 0.5


def test_cli_best_writes_a_drop_in_file(history: Workspace, problem: Path, tmp_path: Path, capsys) -> None:
    out = tmp_path / "kernel.py"
    assert main(["best", str(problem), "--workspace", str(history.root), "-o", str(out)]) == 0
    assert out.read_text() == SRC.format(3)
    assert main(["best", "19_ReLU", "--workspace", str(history.root)]) == 0
    assert capsys.readouterr().out == SRC.format(3)


def test_cli_show(history: Workspace, problem: Path, capsys) -> None:
    assert main(["show", str(problem), "--best", "--workspace", str(history.root)]) == 0
    out = capsys.readouterr().out
    assert out.startswith("# attempt 3 (best): ok") and SRC.format(3) in out and '"verdict": "ok"' in out
    assert main(["show", str(problem), "1", "--json", "--workspace", str(history.root)]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert shown["attempt"]["verdict"] == "compile_error" and shown["source"] == SRC.format(1)
    assert main(["show", str(problem), "--workspace", str(history.root)]) == 0
    assert capsys.readouterr().out.startswith("# attempt 4: ok")


def test_cli_errors_are_one_line(history: Workspace, problem: Path, tmp_path: Path, capsys) -> None:
    root = str(history.root)
    failing = write_problem(tmp_path / "failing.py", scale=5)
    with history.open_problem(failing) as repo:
        commit(repo, untimed(Verdict.INCORRECT))
    for argv in (["log", "no_such_problem", "--workspace", root],
                 ["log", str(tmp_path / "missing.py"), "--workspace", root],
                 ["show", str(problem), "99", "--workspace", root],
                 ["best", str(write_problem(tmp_path / "new.py")), "--workspace", root],
                 ["best", str(failing), "--workspace", root],
                 ["show", "failing", "--best", "--workspace", root],
                 ["log", str(problem), "--workspace", str(tmp_path / "empty")]):
        assert main(argv) == 2, argv
        err = capsys.readouterr().err
        assert err.startswith(f"ratchet {argv[0]}: ") and err.count("\n") == 1, err
