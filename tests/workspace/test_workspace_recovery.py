"""The git workspace under stress: refusals, locking, concurrent writers, writers killed
mid-commit and recovery. (Commits, trailers, the best rule, the commands: tests/workspace/test_workspace.py.)"""
from __future__ import annotations

import os
import random
import signal
import subprocess
import time
from pathlib import Path

import pytest

from agent.cli import main
from agent.workspace.root import DirtyWorkspace, ForeignRepository, Workspace, WorkspaceBusy
from agent.workspace.lock import FileLock
from helpers_workspace import git, timed, untimed, write_problem, writer_command
from helpers_workspace_checks import assert_consistent, commit
from tools.record import Verdict


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
    ("mid_worktree", True), ("before_unjournal", True), ("before_trajectories", True), ("after_trajectories", True),
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
