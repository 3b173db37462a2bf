"""The git workspace: one repository per problem, where each evaluated attempt is one commit.

Layout of a workspace root (default `./workspaces`; `--workspace DIR` or `RATCHET_WORKSPACE`):

    <root>/<name>/             one git repository per problem, branch `main`
        ratchet.json           marker: made by ratchet (first commit); problem path and sha256
        reference.py           the problem file, verbatim (first commit)
        candidate.py           the attempt's candidate source     } written by every attempt
        result.json            its full result record (Result)    }
        best/candidate.py      the best attempt's source and record, committed; written only
        best/result.json       when the best changes
        (extra files)          committed with an attempt when asked (`extra_files`); kept until overwritten

`<name>` is the problem file's stem, characters outside [A-Za-z0-9._-] replaced by `_`, leading
`.`/`-`/`_` dropped, at most 80 characters ("problem" if nothing is left). A workspace belongs
to one exact reference (the sha256 of the file): if `<name>` already holds another version
of the file, this one gets `<name>-<first 8 hex digits of its sha256>`.

Each attempt commit carries trailers (`Ratchet-Verdict: ok`, ...; see
`agent.workspace.attempt`) and a subject such as `attempt 3: ok, 1.83x vs eager, 0.412 ms`.
The branch `best` points at the best attempt's commit; it only moves forward along `main`
and always equals the last attempt whose `Ratchet-New-Best` trailer says yes. The rule for a
new best is `agent.workspace.attempt.beats`: only verdict ok; 95% intervals must not overlap;
a timed attempt beats an untimed one; ties and untimed challengers keep the incumbent.
`git log main` is the reference commit and one commit per attempt, nothing else: the agent's
trajectories are saved on the ref `refs/ratchet/trajectories`, beside main, never in the work
tree (see `agent.workspace.trajectories`; docs/workspace.md describes every ref and trailer).

Concurrency: a writer holds an flock on `.git/ratchet.lock` for each commit (not for the
whole session), waiting up to `lock_timeout` seconds before `WorkspaceBusy`; so writers on
one problem serialize and attempt numbers (taken under the lock) stay unique and increasing,
and problems never share a lock. Readers (`attempts()`, the CLI) take no lock.

Crashes: a commit is built with git plumbing on a private index, published by one
compare-and-swap `update-ref`, then mirrored into the work tree by atomic renames, with a
journal in `.git` saying what is in flight (details in `agent.workspace.repo`). Taking the
lock repairs what a killed writer left: its stale git lock files, its files reset to HEAD,
the `best` branch. Anything else that differs from HEAD is the user's: ratchet refuses to
write over it (`DirtyWorkspace`), and refuses directories it did not create
(`ForeignRepository`). Untracked files elsewhere are left alone and never committed.

The agent's API (errors are `WorkspaceError` subclasses, each with a one-line message):

    ws = Workspace(root, lock_timeout=120.0)                 # Workspace() for the default root
    with ws.open_problem(problem_path) as repo:              # creates the repo on first use
        att = repo.commit_attempt(source, result, model=..., run_id=...,
                                  trajectory=text)           # -> Attempt; trajectory on its ref
        att.number, att.sha, att.became_best, att.is_best
        repo.best(); repo.attempts(); repo.attempt(3); repo.latest()     # Attempt | list | None
        repo.source(att); repo.record(att)                   # candidate source; result dict
        repo.reference_source()                              # the problem file (reference.py)
        repo.best_path, repo.best_result_path                # <repo>/best/candidate.py, .json
        repo.save_trajectory(run_id, text)                   # between attempts, on the trajectories ref
        repo.trajectories(); repo.trajectory(att)            # each run's latest; as of an attempt
    ws.open_existing("19_ReLU" or "path/to/19_ReLU.py")      # read-only, for the CLI
"""
from __future__ import annotations

import errno
import hashlib
import json
import os
import re
import secrets
import shutil
import stat
import time
from pathlib import Path

import git

from agent.workspace.attempt import Attempt, beats
from agent.workspace.lock import fsync_dir, pid_alive
from agent.workspace.repo import (BEST, BEST_DIR, CANDIDATE, MAIN, MARKER, REFERENCE, RESULT, TRAJECTORIES, TRAJECTORY,
                                  DirtyWorkspace, ForeignRepository, ProblemRepo, UnknownProblem, WorkspaceBusy,
                                  WorkspaceError, _crash_point, _marker, entries)

__all__ = ["Workspace", "ProblemRepo", "Attempt", "beats", "resolve_root", "repo_name", "WorkspaceError",
           "ForeignRepository", "DirtyWorkspace", "WorkspaceBusy", "UnknownProblem", "MAIN", "BEST", "BEST_DIR",
           "CANDIDATE", "RESULT", "REFERENCE", "MARKER", "TRAJECTORY", "TRAJECTORIES"]

ENV_ROOT = "RATCHET_WORKSPACE"
DEFAULT_ROOT = "workspaces"


def resolve_root(value: str | os.PathLike | None = None) -> Path:
    """The workspace root: the given value, else $RATCHET_WORKSPACE, else ./workspaces."""
    return Path(value or os.environ.get(ENV_ROOT) or DEFAULT_ROOT)


def repo_name(problem_path: str | os.PathLike) -> str:
    """The directory name for a problem file: its stem, made safe (see the module docstring)."""
    name = re.sub(r"[^A-Za-z0-9._-]+", "_", Path(problem_path).stem).lstrip(".-_")[:80]
    return name or "problem"


def _absent(path: Path) -> bool:
    """Nothing there yet (an empty directory counts as nothing); one that cannot be read raises WorkspaceError."""
    try:
        mode = os.lstat(path).st_mode
    except (FileNotFoundError, NotADirectoryError):  # NotADirectory: a file on the way (_writable_dir names it)
        return True
    except OSError as exc:
        raise WorkspaceError(f"cannot read {path}: {exc.strerror or exc}") from None
    return stat.S_ISDIR(mode) and not entries(path)


def _writable_dir(path: Path) -> None:
    """Raise WorkspaceError unless `path` is a directory this process may create entries in, or
    could be created (its nearest existing ancestor is such a directory)."""
    probe = path
    while not os.path.lexists(probe) and probe.parent != probe:
        probe = probe.parent
    if not probe.is_dir():
        raise WorkspaceError(f"cannot use {path} as a workspace: {probe} is not a directory")
    if not os.access(probe, os.W_OK | os.X_OK):
        raise WorkspaceError(f"cannot {'write in' if probe == path else 'create'} {path}: "
                             f"{probe} is not writable by this user")


class Workspace:
    """A workspace root: one ratchet repository per problem (see the module docstring)."""

    def __init__(self, root: str | os.PathLike | None = None, *, lock_timeout: float | None = 120.0):
        self.root = resolve_root(root)
        self.lock_timeout = lock_timeout

    def open_problem(self, problem_path: str | os.PathLike, *, create: bool = True,
                     data: bytes | None = None) -> "ProblemRepo":
        """The problem's repository, opened for writing (created on first use), recovered and checked.
        `data`: the problem file's bytes, where the caller read them already (the path is then not read)."""
        problem_path = Path(problem_path)
        if data is None:
            try:
                data = problem_path.read_bytes()
            except OSError as exc:
                raise WorkspaceError(f"cannot read problem file {problem_path}: {exc.strerror}") from None
        for _ in range(5):  # each lost creation race is someone else's success: look again
            path = self._find(problem_path, data)
            if not _absent(path):
                break
            if not create:
                raise UnknownProblem(f"no workspace for {problem_path} under {self.root}")
            if self._create(path, problem_path, data):
                break
        else:
            raise WorkspaceError(f"could not create a workspace for {problem_path} under {self.root}")
        repo = ProblemRepo(path, lock_timeout=self.lock_timeout)
        try:
            repo._prepare_for_writing()
        except BaseException:
            repo.close()
            raise
        return repo

    def check_writable(self, problem_path: str | os.PathLike, data: bytes) -> None:
        """Before any long work, what open_problem would refuse, without creating anything: a root
        that is not a directory or cannot be written, a foreign or unreadable repository, one this
        user may not write in. Raises WorkspaceError (one line naming the path)."""
        path = self._find(Path(problem_path), data)
        if _absent(path):
            _writable_dir(self.root)
            return
        for directory in (path, path / ".git"):
            if not os.access(directory, os.W_OK | os.X_OK):
                raise WorkspaceError(f"cannot write in {directory}: not writable by this user")

    def open_existing(self, spec: str | os.PathLike) -> "ProblemRepo":
        """A repository to read, by problem file path or workspace name; no recovery, no lock."""
        spec_path = Path(spec)
        if spec_path.is_file():
            path = self._find(spec_path, spec_path.read_bytes())
            if _absent(path):
                raise UnknownProblem(f"no workspace for {spec} under {self.root}")
        elif spec_path.name == str(spec) and not str(spec).startswith(".") and (self.root / spec_path).is_dir():
            path = self.root / spec_path
        else:
            known = ", ".join(self.problems()[:8]) or "none"
            raise UnknownProblem(f"no problem file or workspace named {str(spec)!r} under {self.root} (workspaces: {known})")
        return ProblemRepo(path, read_only=True)

    def problems(self) -> list[str]:
        """Names of the ratchet repositories under the root."""
        return sorted(name for name in entries(self.root) or () if not name.startswith(".")
                      and (self.root / name).is_dir() and _marker(self.root / name) is not None)

    def _find(self, problem_path: Path, data: bytes) -> Path:
        """The directory for this exact reference: `<name>`, else `<name>-<hash8>` (maybe not there yet)."""
        digest = hashlib.sha256(data).hexdigest()
        base = repo_name(problem_path)
        for name in (base, f"{base}-{digest[:8]}"):
            path = self.root / name
            if _absent(path):
                return path
            marker = _marker(path)
            if marker is None:
                raise ForeignRepository(f"{path} exists but is not a ratchet workspace (no {MARKER} in a commit on main); "
                                        "move it away or choose another --workspace")
            if marker.get("reference_sha256") == digest:
                return path
        raise WorkspaceError(f"{self.root / base} and its hashed variant both hold other references")

    def _create(self, path: Path, problem_path: Path, data: bytes) -> bool:
        """Build the repository in a private directory and rename it into place; False if we lost a race."""
        tmp = self.root / f".ratchet-new-{os.getpid()}-{secrets.token_hex(4)}-{path.name}"
        try:
            self.root.mkdir(parents=True, exist_ok=True)
            self._sweep_abandoned()
            git.Repo.init(tmp, mkdir=True).close()
        except OSError as exc:
            raise WorkspaceError(f"cannot create a workspace under {self.root}: {exc.strerror or exc}") from None
        with ProblemRepo(tmp, check=False) as repo:
            repo._git("symbolic-ref", "HEAD", MAIN)
            repo._git("config", "core.fsync", "committed,index")
            marker = {"ratchet_workspace": 1, "name": path.name, "problem": str(problem_path.resolve()),
                      "reference_sha256": hashlib.sha256(data).hexdigest(),
                      "created_at": time.strftime("%Y-%m-%dT%H:%M:%S%z")}
            files = {MARKER: (json.dumps(marker, indent=2) + "\n").encode(), REFERENCE: data}
            repo._commit(files, f"reference: {problem_path.name}\n\nRatchet-Kind: reference\n", parent=None)
        _crash_point("before_rename")
        try:
            os.rename(tmp, path)
        except OSError as exc:
            shutil.rmtree(tmp, ignore_errors=True)
            if exc.errno in (errno.ENOTEMPTY, errno.EEXIST):  # someone else created it first
                return False
            raise WorkspaceError(f"cannot create {path}: {exc.strerror}") from None
        fsync_dir(self.root)
        return True

    def _sweep_abandoned(self) -> None:
        """Remove half-built repositories of creators that died (`.ratchet-new-<pid>-...`)."""
        for tmp in self.root.glob(".ratchet-new-*"):
            try:
                pid = int(tmp.name.split("-")[2])
                old = time.time() - tmp.stat().st_mtime > 10
            except (ValueError, IndexError, OSError):
                continue
            if old and not pid_alive(pid):
                shutil.rmtree(tmp, ignore_errors=True)


