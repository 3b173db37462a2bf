"""One problem's git repository: the commit protocol, crash recovery, and reading attempts back.

Opened through `agent.workspace.root.Workspace` (see that module for the layout and the rules).

A commit is made with plumbing on a private index under `.git/ratchet-tmp/`: blobs, tree,
commit, then one compare-and-swap `update-ref` of main publishes it; the `best` branch follows,
then the files are renamed into the work tree and the real index is reset for them. Before
any of it, `.git/ratchet-journal.json` records the writer's pid, the paths it will write and
the HEAD it started from; it is removed last. Every writer holds `.git/ratchet.lock` (flock)
around this, and on taking the lock first runs `_recover`: a journal found then belongs to a
writer that died or raised, so its git lock files (once `_STALE_GRACE_S` old, so that its
orphaned git children can finish) and its temporary files are removed, its paths are reset to
HEAD, and the `best` branch is set to the last attempt whose trailer says it became best.

Trajectory saves (agent.workspace.trajectories) use the same plumbing under the same lock, but
publish on `refs/ratchet/trajectories` and write nothing to the work tree or the real index;
their journal lists no paths, so recovery has only stale lock and temporary files to clear.
"""
from __future__ import annotations

import json
import os
import shutil
import signal
from pathlib import Path
from typing import Any

import git

from agent.workspace.attempt import Attempt, beats, parse_trailers, precision_conflict
from agent.workspace.errors import DirtyWorkspace, ForeignRepository, UnknownProblem, WorkspaceBusy, WorkspaceError
from agent.workspace.lock import FileLock, LockTimeout, atomic_write, fsync_dir, wait_gone, write_durable
from agent.workspace.review import review_lines
from agent.workspace.trajectories import (LEGACY_FILE, TRAJECTORIES, SavedTrajectory, check_run_id, save, saved_trajectories,
                                         trajectory_at)
from tools.record import Result

MAIN, BEST = "refs/heads/main", "refs/heads/best"
MARKER, REFERENCE, CANDIDATE, RESULT = "ratchet.json", "reference.py", "candidate.py", "result.json"
TRAJECTORY = LEGACY_FILE  # on main in older workspaces; trajectories now live on TRAJECTORIES
BEST_DIR = "best"
_RESERVED = {MARKER, REFERENCE, CANDIDATE, RESULT}
_LOCK, _JOURNAL, _TMP = "ratchet.lock", "ratchet-journal.json", "ratchet-tmp"
_STALE_GRACE_S = 2.0  # a git lock file this old, left by a dead writer, is stale
_GIT_ENV = {
    "GIT_AUTHOR_NAME": "ratchet", "GIT_AUTHOR_EMAIL": "ratchet@localhost",
    "GIT_COMMITTER_NAME": "ratchet", "GIT_COMMITTER_EMAIL": "ratchet@localhost",
    "GIT_OPTIONAL_LOCKS": "0", "GIT_TERMINAL_PROMPT": "0",
}


def _crash_point(name: str) -> None:
    """Fault injection for the durability tests: SIGKILL this process at the named step."""
    if os.environ.get("RATCHET_WORKSPACE_CRASH_AT") == name:
        os.kill(os.getpid(), signal.SIGKILL)


def entries(path: Path) -> list[str] | None:
    """The names in directory `path`; None when nothing is there or it is not a directory. One that
    exists but cannot be read raises WorkspaceError naming it: an unreadable workspace is never taken
    for an absent or a foreign one."""
    try:
        return os.listdir(path)
    except (FileNotFoundError, NotADirectoryError):
        return None
    except OSError as exc:
        raise WorkspaceError(f"cannot read {path}: {exc.strerror or exc}") from None


def _marker(path: Path) -> dict | None:
    """The ratchet.json committed on main, or None if `path` is not a ratchet repository."""
    if ".git" not in (entries(path) or ()) or entries(path / ".git") is None:
        return None
    try:
        with ProblemRepo(path, read_only=True, check=False) as repo:
            text = repo._git("cat-file", "blob", f"{MAIN}:{MARKER}", check=False)
        data = json.loads(text) if text else None
    except (git.exc.GitError, ValueError):
        return None
    return data if isinstance(data, dict) and data.get("ratchet_workspace") else None


class ProblemRepo:
    """One problem's repository. Use as a context manager (it owns a GitPython Repo to close)."""

    def __init__(self, path: Path, *, read_only: bool = False, lock_timeout: float | None = 120.0, check: bool = True):
        self.path = Path(path).absolute()
        self.name = self.path.name
        self.read_only = read_only
        self.lock_timeout = lock_timeout
        self._gitdir = self.path / ".git"
        for directory in (self.path, self._gitdir):  # unreadable: say so, not "not a git repository"
            entries(directory)
        try:
            self._repo = git.Repo(self.path)
        except (git.exc.InvalidGitRepositoryError, git.exc.NoSuchPathError):
            raise ForeignRepository(f"{self.path} is not a git repository created by ratchet") from None
        self._env = {**_GIT_ENV, "GIT_DIR": str(self._gitdir), "GIT_WORK_TREE": str(self.path),
                     "GIT_INDEX_FILE": str(self._gitdir / "index")}
        if check and _marker(self.path) is None:
            self.close()
            raise ForeignRepository(f"{self.path} is not a ratchet workspace (no {MARKER} on main); ratchet will not touch it")

    # -- lifetime -------------------------------------------------------------------------
    def close(self) -> None:
        if self._repo is not None:
            self._repo.close()
            self._repo = None

    def __enter__(self) -> "ProblemRepo":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def best_path(self) -> Path:
        """The stable path of the best candidate (with best/result.json beside it)."""
        return self.path / BEST_DIR / CANDIDATE

    @property
    def best_result_path(self) -> Path:
        return self.path / BEST_DIR / RESULT

    # -- reading --------------------------------------------------------------------------
    def attempts(self) -> list[Attempt]:
        """All attempts on main, oldest first, parsed from their trailers."""
        out = self._git("log", "--format=%H%x1f%ct%x1f%s%x1f%(trailers:only,unfold)%x1e", MAIN)
        attempts = []
        for entry in filter(None, (e.strip("\n") for e in out.split("\x1e"))):
            sha, ct, subject, trailers = entry.split("\x1f")
            fields = parse_trailers(trailers)
            if fields.get("Ratchet-Kind") == "attempt":
                attempts.append(Attempt.from_trailers(fields, sha=sha, subject=subject, committed_at=int(ct)))
        attempts.reverse()
        best = next((a for a in reversed(attempts) if a.became_best), None)
        if best is not None:
            best.is_best = True
        return attempts

    def attempt(self, number: int) -> Attempt | None:
        return next((a for a in self.attempts() if a.number == number), None)

    def best(self) -> Attempt | None:
        return next((a for a in self.attempts() if a.is_best), None)

    def latest(self) -> Attempt | None:
        attempts = self.attempts()
        return attempts[-1] if attempts else None

    def source(self, attempt: Attempt) -> str:
        return self._git("cat-file", "blob", f"{attempt.sha}:{CANDIDATE}", raw=True)

    def record(self, attempt: Attempt) -> dict:
        return json.loads(self._git("cat-file", "blob", f"{attempt.sha}:{RESULT}", raw=True))

    def reference_source(self) -> str:
        """The problem file as the workspace holds it (reference.py, committed first on main)."""
        return self._git("cat-file", "blob", f"{MAIN}:{REFERENCE}", raw=True)

    def trajectories(self) -> list[SavedTrajectory]:
        """The latest saved trajectory of each run, oldest run first (agent.workspace.trajectories)."""
        return saved_trajectories(self, MAIN)

    def trajectory(self, attempt: Attempt) -> str | None:
        """The run's trajectory as it stood when this attempt was committed, if one was saved with it."""
        return trajectory_at(self, attempt)

    # -- writing --------------------------------------------------------------------------
    def commit_attempt(self, source: str, result: Result | dict, *, model: str, run_id: str, summary: str = "",
                       trajectory: str | None = None, extra_files: dict[str, str] | None = None,
                       spend: dict[str, Any] | None = None, lineage: tuple[int, int | None] | None = None) -> Attempt:
        """Commit one evaluated attempt (any verdict) on main; move `best` if it beats the incumbent.

        `summary` is the model's one-line account of the change, for the commit body;
        `trajectory` (the run's conversation so far) is saved on the trajectories ref, linked to
        this attempt, under the same lock; `extra_files` go into the attempt's commit. `spend`: what
        the attempt cost (`tokens`, `cost_usd`, `run_cost_usd`: agent/cost.py), for its trailers.
        `lineage`: (the search's conversation it came from, the attempt that conversation answered last)."""
        result = result if isinstance(result, Result) else Result.from_dict(result)
        if trajectory is not None:
            check_run_id(run_id)  # before anything is committed
        files = {CANDIDATE: source.encode(), RESULT: (json.dumps(result.to_dict(), indent=2) + "\n").encode()}
        for name, text in (extra_files or {}).items():
            files[_check_extra_name(name)] = text.encode()
        with self._locked():
            previous = self.attempts()
            conflict = precision_conflict(previous, result.precision) if result.precision else None
            if conflict:  # a run of another precision started beside this one (optimize checks at its start)
                raise WorkspaceError(f"{self.path}: {conflict}")
            incumbent = next((a for a in previous if a.is_best), None)
            number = max((a.number for a in previous), default=0) + 1
            attempt = Attempt.from_result(number, result, model=model, run_id=run_id, source=source)
            attempt.became_best = beats(attempt, incumbent)
            if spend is not None:
                attempt.tokens = int(spend.get("tokens") or 0)
                attempt.cost_usd, attempt.run_cost_usd = spend.get("cost_usd"), spend.get("run_cost_usd")
            if lineage is not None:
                attempt.lineage, attempt.parent_attempt = lineage
            if attempt.became_best:
                files[f"{BEST_DIR}/{CANDIDATE}"] = files[CANDIDATE]
                files[f"{BEST_DIR}/{RESULT}"] = files[RESULT]
            before = None if incumbent is None else (incumbent.number, self.source(incumbent))
            body = review_lines(result, source=source, summary=summary, best=before)
            attempt.sha = self._commit(files, attempt.message(body), move_best=attempt.became_best)
            if trajectory is not None:
                save(self, run_id, trajectory, attempt)
        attempt.subject = attempt.message().splitlines()[0]
        attempt.is_best = attempt.became_best
        return attempt

    def save_trajectory(self, run_id: str, text: str) -> str | None:
        """Save a run's trajectory on the trajectories ref (not on main); None if unchanged."""
        with self._locked():
            return save(self, run_id, text)

    # -- the commit protocol --------------------------------------------------------------
    def _commit(self, files: dict[str, bytes], message: str, *, parent: str | None = "HEAD", move_best: bool = False) -> str:
        """Commit `files` over the parent's tree, publish it on main, mirror it into the work tree."""
        head = self._git("rev-parse", "--verify", "HEAD") if parent else None
        if head:
            self._check_clean(files)
            atomic_write(self._gitdir / _JOURNAL, json.dumps({"pid": os.getpid(), "paths": sorted(files), "head": head}))
        _crash_point("after_journal")
        sha, staged = self._write_commit(files, message, head)
        _crash_point("before_main")
        self._git("update-ref", "-m", message.splitlines()[0], MAIN, sha, head or "")
        _crash_point("after_main")
        if move_best:
            self._git("update-ref", "-m", message.splitlines()[0], BEST, sha)
        _crash_point("after_best")
        for i, (path, name) in enumerate(zip(staged, files)):
            (self.path / name).parent.mkdir(parents=True, exist_ok=True)
            os.replace(path, self.path / name)
            if i == 0:
                _crash_point("mid_worktree")
        for folder in {(self.path / name).parent for name in files}:
            fsync_dir(folder)
        self._git("reset", "-q", "HEAD", "--", *files)
        _crash_point("before_unjournal")
        (self._gitdir / _JOURNAL).unlink(missing_ok=True)
        return sha

    def _commit_ref(self, ref: str, files: dict[str, bytes], message: str) -> str:
        """Under the lock: commit `files` over `ref`'s tree and move `ref` to it (created if absent).

        HEAD, main, the index and the work tree are not touched; a journal with no paths marks
        the write in flight, so that recovery knows its git lock files for a dead writer's."""
        parent = self._git("rev-parse", "-q", "--verify", ref, check=False) or None
        atomic_write(self._gitdir / _JOURNAL, json.dumps({"pid": os.getpid(), "paths": [], "head": parent or "", "ref": ref}))
        sha, staged = self._write_commit(files, message, parent)
        _crash_point(f"before_{ref.rsplit('/', 1)[-1]}")
        self._git("update-ref", "-m", message.splitlines()[0], ref, sha, parent or "")
        _crash_point(f"after_{ref.rsplit('/', 1)[-1]}")
        for path in staged:
            path.unlink(missing_ok=True)
        (self._gitdir / _JOURNAL).unlink(missing_ok=True)
        return sha

    def _write_commit(self, files: dict[str, bytes], message: str, parent: str | None) -> tuple[str, list[Path]]:
        """The blobs, tree and commit object of `files` over `parent`'s tree, built on a private
        index under .git/ratchet-tmp; nothing is published. Returns the commit and the files
        staged there, one per entry of `files`, holding its bytes."""
        tmp = self._gitdir / _TMP
        tmp.mkdir(exist_ok=True)
        staged = [tmp / f"blob-{os.getpid()}-{i}" for i in range(len(files))]
        for path, data in zip(staged, files.values()):
            write_durable(path, data)
        shas = self._git("hash-object", "-w", "--no-filters", "--", *map(str, staged)).split()
        index, info, msg = (tmp / f"{kind}-{os.getpid()}" for kind in ("index", "info", "msg"))
        info.write_text("".join(f"100644 {sha}\t{name}\n" for sha, name in zip(shas, files)))
        msg.write_text(message)
        env = {"GIT_INDEX_FILE": str(index)}
        self._git("read-tree", *([parent] if parent else ["--empty"]), env=env)
        with open(info, "rb") as stdin:
            self._git("update-index", "--index-info", env=env, istream=stdin)
        tree = self._git("write-tree", env=env)
        sha = self._git("commit-tree", "--no-gpg-sign", tree, *(["-p", parent] if parent else []), "-F", str(msg))
        for path in (index, info, msg):
            path.unlink(missing_ok=True)
        return sha, staged

    def _locked(self) -> FileLock:
        if self.read_only:
            raise WorkspaceError(f"{self.name} was opened read-only")
        return _RepoLock(self)

    def _prepare_for_writing(self) -> None:
        """On open: repair what a killed writer left (the lock does), then refuse what is not ours."""
        with self._locked():
            self._check_clean({})

    def _recover(self) -> None:
        """Under the lock: finish or undo a dead writer's commit (see the module docstring)."""
        head = self._git("symbolic-ref", "-q", "HEAD", check=False)
        if head != MAIN:
            raise DirtyWorkspace(f"{self.path}: HEAD is {head or 'detached'}, not main; "
                                 f"run `git -C {self.path} checkout main` first")
        # We hold the writer lock, so a journal belongs to a writer that died (or raised) mid-commit;
        # git lock files it left are stale once its orphaned git children had time to finish.
        journal_path = self._gitdir / _JOURNAL
        try:
            journal = json.loads(journal_path.read_text()) if journal_path.exists() else None
        except ValueError:  # torn by a power loss before its fsync: still a dead writer's
            journal = {"pid": 0, "paths": [], "head": ""}
        locks = [p for p in (*self._gitdir.glob("*.lock"), *self._gitdir.glob("refs/**/*.lock")) if p.name != _LOCK]
        for lock in locks:
            if wait_gone(lock, _STALE_GRACE_S):
                continue
            if journal is None:
                raise WorkspaceBusy(f"{lock} was not left by a ratchet writer (another git process running?); "
                                    "remove it if no git command is running")
            lock.unlink(missing_ok=True)
        if journal is not None:
            for stray in self._gitdir.glob("objects/**/tmp_obj_*"):
                stray.unlink(missing_ok=True)
            for name in journal["paths"]:
                if self._git("cat-file", "-e", f"HEAD:{name}", status=True) == 0:
                    (self.path / name).parent.mkdir(parents=True, exist_ok=True)
                    text = self._git("cat-file", "blob", f"HEAD:{name}", raw=True)
                    atomic_write(self.path / name, text.encode(), tmp_dir=self._gitdir)
                else:
                    (self.path / name).unlink(missing_ok=True)
            if journal["paths"]:  # with none (a trajectory save), `reset HEAD --` would reset the whole index
                self._git("reset", "-q", "HEAD", "--", *journal["paths"])
        shutil.rmtree(self._gitdir / _TMP, ignore_errors=True)
        best = next((a for a in self.attempts() if a.is_best), None)
        current = self._git("rev-parse", "-q", "--verify", BEST, check=False)
        if best is not None and current != best.sha:
            self._git("update-ref", "-m", "ratchet: repair best", BEST, best.sha)
        journal_path.unlink(missing_ok=True)

    def _check_clean(self, files: dict) -> None:
        """Refuse changes to tracked files, and untracked files where we are about to write."""
        out = self._git("status", "--porcelain=v1", "-z", "--untracked-files=all", raw=True)
        entries = [e for e in out.split("\0") if len(e) > 3]
        changed = [e[3:] for e in entries if not e.startswith("??")]
        clash = [e[3:] for e in entries if e.startswith("??") and e[3:] in files]
        if changed or clash:
            what = "changes to " + ", ".join(changed[:3]) if changed else "untracked " + ", ".join(clash[:3])
            raise DirtyWorkspace(f"{self.path} has {what} that ratchet did not make; commit or discard them "
                                 f"(git -C {self.path} status)")

    def _git(self, *args: str, env: dict | None = None, raw: bool = False, check: bool = True,
             status: bool = False, istream=None) -> str | int:
        """Run git in this repository; stdout (stripped unless raw), or the exit status if `status`.

        With check=False a failing command returns "" instead of raising."""
        if self._repo is None:
            raise WorkspaceError(f"{self.name} is closed")
        rc, out, err = self._repo.git.execute(["git", *args], env={**self._env, **(env or {})}, istream=istream,
                                              with_extended_output=True, with_exceptions=False,
                                              strip_newline_in_stdout=False)
        if status:
            return rc
        if rc != 0:
            if check:
                raise git.exc.GitCommandError(["git", *args], rc, err)
            return ""
        return out if raw else out.strip()


class _RepoLock(FileLock):
    """The repository's writer lock; recovery runs on every acquisition."""

    def __init__(self, repo: ProblemRepo):
        super().__init__(repo._gitdir / _LOCK, repo.lock_timeout)
        self.repo = repo

    def __enter__(self) -> "_RepoLock":
        try:
            self.acquire()
        except LockTimeout as exc:
            raise WorkspaceBusy(f"workspace {self.repo.name} is busy: {exc}") from None
        try:
            self.repo._recover()
        except BaseException:
            self.release()
            raise
        return self


def _check_extra_name(name: str) -> str:
    """Extra files: plain relative paths, not the files ratchet manages itself."""
    parts = name.split("/")
    if (not name or name.startswith("/") or any(p in ("", ".", "..") for p in parts) or parts[0] == ".git"
            or name in _RESERVED or parts[0] == BEST_DIR or any(c in name for c in "\t\n\r\0\\")):
        raise ValueError(f"extra file name {name!r} is not allowed (reserved, absolute or unsafe)")
    return name
