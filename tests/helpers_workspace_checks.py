"""Shared by tests/workspace/test_workspace.py and tests/workspace/test_workspace_recovery.py: a candidate source,
a commit shortcut, and the invariants every problem repository must hold after anything."""
from __future__ import annotations

import hashlib
import json

from agent.workspace.root import BEST, MAIN, TRAJECTORIES, ProblemRepo
from agent.workspace.attempt import Attempt, beats
from helpers_workspace import git
from tools.record import Result

SRC = "import torch\n\nclass ModelNew(torch.nn.Module):\n    pass  # {}\n"


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
    assert_log_shape(repo, len(attempts))
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


def assert_log_shape(repo: ProblemRepo, attempts: int) -> None:
    """main is the reference commit and one commit per attempt; trajectories sit on their own ref,
    each save of kind trajectory, those made with an attempt naming that attempt's commit on main."""
    kinds = git(repo.path, "log", "--format=%(trailers:key=Ratchet-Kind,valueonly,separator=)", MAIN).stdout.split()
    assert kinds == ["attempt"] * attempts + ["reference"]
    if git(repo.path, "rev-parse", "-q", "--verify", TRAJECTORIES, check=False).returncode != 0:
        return
    on_main = set(git(repo.path, "rev-list", MAIN).stdout.split())
    saves = git(repo.path, "log", "--format=%(trailers:key=Ratchet-Kind,valueonly,separator=)%x1f"
                "%(trailers:key=Ratchet-Attempt-Commit,valueonly,separator=)", TRAJECTORIES).stdout.splitlines()
    for line in saves:
        kind, linked = line.split("\x1f")
        assert kind == "trajectory"
        assert not linked or linked in on_main
