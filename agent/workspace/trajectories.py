"""Where a problem's repository keeps the agent's trajectories: on a ref of their own.

`refs/ratchet/trajectories` is a chain of commits beside `main`, written with git plumbing
(agent.workspace.repo `_commit_ref`) under the writer lock; it never touches HEAD, `main`, the
index or the work tree, so `git log main` holds the reference and one commit per attempt and
nothing else. Each commit's tree holds every run's latest trajectory, one file per run:

    <run>.json        the run's trajectory (agent.loop.nodes.trajectory_text), as last saved;
                      <run> is the run id, or `run-<sha256 prefix>` where the id is not a safe name

and its message says which run it saved, and with which attempt:

    trajectory: run 20261123-070102-ab12cd, attempt 3

    Ratchet-Kind: trajectory
    Ratchet-Run-Id: 20261123-070102-ab12cd
    Ratchet-Attempt: 3                  } only on the save made with that attempt's commit
    Ratchet-Attempt-Commit: 5d41402a...  }

So the tip holds the latest of every run, and `trajectory_at(attempt)` finds the conversation as
it stood when an attempt was committed. `git clone` copies only branches: fetch this ref
explicitly (`git fetch origin 'refs/ratchet/*:refs/ratchet/*'`) to take trajectories along.

Workspaces written before this ref existed kept `trajectory.json` on `main` (committed with
each attempt, and alone as `trajectory` commits of kind `files`); `saved_trajectories` reads those
too, and where a run has both, the ref's newer copy wins.
"""
from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING

from agent.workspace.attempt import Attempt, one_line, parse_trailers

if TYPE_CHECKING:
    from agent.workspace.repo import ProblemRepo

TRAJECTORIES = "refs/ratchet/trajectories"
LEGACY_FILE = "trajectory.json"  # where older workspaces kept it, on main
KIND_TRAJECTORY = "trajectory"
_SAFE_RUN = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,99}")


@dataclass
class SavedTrajectory:
    """The latest saved trajectory of one run."""

    run_id: str
    text: str  # the JSON text as saved
    commit: str  # the commit it was read from (on the trajectories ref, or on main in old workspaces)
    first_saved_at: int  # unix seconds of the run's first save: runs are listed in this order


def check_run_id(run_id: str) -> str:
    """A run id a trajectory can be saved under: one non-empty line (it is a trailer's value)."""
    if not run_id or run_id != one_line(run_id):
        raise ValueError(f"a trajectory's run id must be one non-empty line, not {run_id!r}")
    return run_id


def run_file(run_id: str) -> str:
    """The run's file in the trajectories tree."""
    if _SAFE_RUN.fullmatch(run_id):
        return f"{run_id}.json"
    return f"run-{hashlib.sha256(run_id.encode()).hexdigest()[:16]}.json"


def message(run_id: str, attempt: Attempt | None) -> str:
    run = one_line(run_id)
    subject = f"trajectory: run {run}" + (f", attempt {attempt.number}" if attempt else "")
    trailers = [("Ratchet-Kind", KIND_TRAJECTORY), ("Ratchet-Run-Id", run)]
    if attempt is not None:
        trailers += [("Ratchet-Attempt", str(attempt.number)), ("Ratchet-Attempt-Commit", attempt.sha)]
    return f"{subject}\n\n" + "".join(f"{k}: {v}\n" for k, v in trailers)


def save(repo: "ProblemRepo", run_id: str, text: str, attempt: Attempt | None = None) -> str | None:
    """Under the writer lock: save `text` as the run's trajectory; None if unchanged (and no attempt)."""
    name = run_file(check_run_id(run_id))
    data = text.encode()
    if attempt is None:
        current = repo._git("rev-parse", "-q", "--verify", f"{TRAJECTORIES}:{name}", check=False)
        if current and current == _blob_sha(repo, data):
            return None
    return repo._commit_ref(TRAJECTORIES, {name: data}, message(run_id, attempt))


def saved_trajectories(repo: "ProblemRepo", main: str) -> list[SavedTrajectory]:
    """The latest saved trajectory of each run, oldest run first: from the trajectories ref, and
    from `main` (`trajectory.json`) for runs saved by older versions."""
    legacy = _legacy(repo, main)
    found = {t.run_id: t for t in legacy}
    for t in _on_ref(repo):
        old = found.get(t.run_id)
        if old is not None:
            t.first_saved_at = min(t.first_saved_at, old.first_saved_at)
        found[t.run_id] = t
    return sorted(found.values(), key=lambda t: t.first_saved_at)  # stable: chain order within a second


def trajectory_at(repo: "ProblemRepo", attempt: Attempt) -> str | None:
    """The run's trajectory as saved with this attempt's commit (None if none was)."""
    out = repo._git("log", "--format=%H%x1f%(trailers:key=Ratchet-Attempt-Commit,valueonly,separator=)",
                    TRAJECTORIES, "--", check=False)
    for line in out.splitlines():
        commit, _, attempt_sha = line.partition("\x1f")
        if attempt_sha.strip() == attempt.sha:
            return _read(repo, f"{commit}:{run_file(attempt.run_id)}")
    # an older workspace: it rode in the attempt commit (a copy inherited from the parent is not this attempt's)
    mine = repo._git("rev-parse", "-q", "--verify", f"{attempt.sha}:{LEGACY_FILE}", check=False)
    inherited = repo._git("rev-parse", "-q", "--verify", f"{attempt.sha}^:{LEGACY_FILE}", check=False)
    return _read(repo, mine) if mine and mine != inherited else None


def _on_ref(repo: "ProblemRepo") -> list[SavedTrajectory]:
    tip = repo._git("rev-parse", "-q", "--verify", TRAJECTORIES, check=False)
    if not tip:
        return []
    out = repo._git("log", "--reverse", "--format=%ct%x1f%(trailers:only,unfold)%x1e", tip)
    first: dict[str, int] = {}
    for entry in filter(None, (e.strip("\n") for e in out.split("\x1e"))):
        ct, _, trailers = entry.partition("\x1f")
        run_id = parse_trailers(trailers).get("Ratchet-Run-Id", "")
        first.setdefault(run_id, int(ct))
    saved = []
    for run_id, at in first.items():
        text = _read(repo, f"{tip}:{run_file(run_id)}")
        if text is not None:
            saved.append(SavedTrajectory(run_id=run_id, text=text, commit=tip, first_saved_at=at))
    return saved


def _legacy(repo: "ProblemRepo", main: str) -> list[SavedTrajectory]:
    """Runs whose trajectory.json was committed on main, each at its latest version (old workspaces)."""
    latest: dict[str, SavedTrajectory] = {}
    for commit in repo._repo.iter_commits(main, paths=LEGACY_FILE):  # newest first
        try:
            text = (commit.tree / LEGACY_FILE).data_stream.read().decode()
            data = json.loads(text)
        except (KeyError, ValueError):  # deleted in this commit, or not JSON: not a trajectory
            continue
        run_id = str(data.get("run_id") or commit.hexsha) if isinstance(data, dict) else commit.hexsha
        if run_id not in latest:
            latest[run_id] = SavedTrajectory(run_id=run_id, text=text, commit=commit.hexsha, first_saved_at=0)
        latest[run_id].first_saved_at = commit.committed_date
    return sorted(latest.values(), key=lambda t: t.first_saved_at)


def _read(repo: "ProblemRepo", spec: str) -> str | None:
    if repo._git("cat-file", "-e", spec, status=True) != 0:
        return None
    return repo._git("cat-file", "blob", spec, raw=True)


def _blob_sha(repo: "ProblemRepo", data: bytes) -> str:
    header = f"blob {len(data)}\0".encode()
    object_format = repo._git("rev-parse", "--show-object-format", check=False) or "sha1"
    return hashlib.new(object_format, header + data).hexdigest()
