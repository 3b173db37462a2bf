"""The driver's side of a batch on a cluster: one service that performs, in the driver's
workspace, every repository and checkpoint operation of the agent runs on the nodes.

Read agent/batch/channel.py first (the contract: requests, channels, leases and fencing).

`WorkspaceService(root, problems, session, log=..., logs=...)` lives in the process that runs
`ratchet batch`; an executor carries `Request`s from node-side runs (agent.batch.remote) to
`service.handle(request)` and the answer (or the exception) back. For each problem the service
opens a `LocalStore` problem (agent.loop.run_store), the very repository, SQLite checkpointer and run
pointer a local run uses, so commits get the same numbering, trailers and best rule, and
`ratchet log`, `best`, `report` and `--resume` cannot tell a cluster run from a local one.

The problem files are read once, when the service is made: a lease hands the text to the node
(no shared file system), and the workspace is keyed by those bytes, whatever happens to the file
afterwards.

Agent logs: the `log` op appends a node-side run's log lines (`lines`, a list of strings) to
`<logs>/<key>.log`, the file a local run of the problem writes (`logs` is the run directory's
`logs/`; without one, each line goes to `log` prefixed with the key). It is checked against the
lease like every other op, so a run that lost its lease cannot write into the log of the run
that took it.

Leases: `acquire` issues a new token (`<session>:<n>`, n counting up within the service) and
from then on the problem refuses every other token with `Fenced`; `release` ends the lease
(later requests with its token are refused too) and closes the problem's files. The token is
checked and the operation performed under one lock per problem, so a run that lost its lease can
never slip a write in between. Problems do not share a lock.

Errors: `Fenced` and the workspace's own errors (`WorkspaceError` subclasses, one-line messages)
go back as they are; any other exception out of an operation is logged with its traceback and
answered with a one-line `ServiceError` naming the problem and the operation.
"""
from __future__ import annotations

import itertools
import sys
import threading
import traceback
from collections.abc import Callable
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agent.batch.channel import Fenced, Request, ServiceError
from agent.workspace.repo import WorkspaceError

# op name -> what it does; every other op is refused
OPS = frozenset({
    "acquire", "release", "info", "log",
    "commit_attempt", "save_trajectory", "attempts", "attempt", "best", "latest", "source", "record",
    "get_tuple", "list", "put", "put_writes",
    "read_pointer", "write_pointer",
})
_SCALARS = (str, int, float, bool, type(None))


@dataclass
class _Problem:
    path: Path  # the driver's problem file (it names the workspace)
    data: bytes  # its bytes when the service was made
    lock: threading.Lock = field(default_factory=threading.Lock)
    token: str | None = None  # the lease in force; None: none
    stack: ExitStack | None = None  # holds the opened problem while a lease is out
    opened: Any = None  # agent.loop.run_store.LocalProblem


class WorkspaceService:
    """Performs node-side runs' requests in the workspace under `root` (see the module docstring).

    `problems` maps each problem's key (agent.batch.problem.problem_key) to its file; `session`
    names this driver session (tokens carry it); `log` takes one line of the service's own (tracebacks,
    a line each); `logs` is the directory of the problems' agent logs (`<logs>/<key>.log`)."""

    def __init__(self, root: Path, problems: dict[str, Path], session: str, *,
                 log: Callable[[str], None] | None = None, logs: Path | None = None):
        self.root = Path(root)
        self.session = session
        self.log = log or (lambda line: print(line, file=sys.stderr, flush=True))
        self.logs = Path(logs) if logs is not None else None
        self._counter = itertools.count(1)
        self._counter_lock = threading.Lock()
        self._problems: dict[str, _Problem] = {}
        for key, path in problems.items():
            try:
                data = Path(path).read_bytes()
            except OSError as exc:
                raise WorkspaceError(f"cannot read problem file {path}: {exc.strerror}") from None
            self._problems[key] = _Problem(Path(path), data)

    # -- the entry point ------------------------------------------------------------------
    def handle(self, request: Request) -> Any:
        """Perform one request; its answer, or raise Fenced / WorkspaceError / ServiceError."""
        problem = self._problems.get(request.key)
        if problem is None:
            raise ServiceError(f"problem {request.key!r}: not in this batch")
        if request.op not in OPS:
            raise ServiceError(f"problem {request.key}: unknown operation {request.op!r}")
        with problem.lock:
            if request.op == "acquire":
                return self._guard(request, lambda: self._acquire(request.key, problem, **request.args))
            if request.token is None or request.token != problem.token:
                what = "no lease is out" if problem.token is None else f"lease {problem.token} was taken since"
                raise Fenced(f"problem {request.key}: {request.op} with lease {request.token} refused ({what})")
            if request.op == "release":
                return self._close(problem)
            if request.op == "log":
                return self._guard(request, lambda: self._agent_log(request.key, **request.args))
            operation = getattr(self, f"_op_{request.op}")
            return self._guard(request, lambda: operation(problem.opened, **request.args))

    def close(self) -> None:
        """End every lease and close every problem's files (the end of the driver's session)."""
        for problem in self._problems.values():
            with problem.lock:
                self._close(problem)

    def _guard(self, request: Request, operation: Callable[[], Any]) -> Any:
        try:
            return operation()
        except WorkspaceError:
            raise
        except Exception as exc:  # noqa: BLE001 - any bug in an op is answered, not fatal to the driver; logged in full
            for line in traceback.format_exc().rstrip().splitlines():
                self.log(f"service: {request.key} {request.op}: {line}")
            message = " ".join(f"{type(exc).__name__}: {exc}".split())[:300]
            raise ServiceError(f"problem {request.key}: {request.op} failed: {message}") from None

    # -- leases ---------------------------------------------------------------------------
    def _acquire(self, key: str, problem: _Problem, since: float | None = None) -> dict[str, Any]:
        from agent.batch.problem import unfinished_since
        from agent.loop.run_store import LocalStore

        if problem.opened is None:
            stack = ExitStack()
            try:
                problem.opened = stack.enter_context(LocalStore(self.root).open(problem.path, data=problem.data))
            except BaseException:
                stack.close()
                raise
            problem.stack = stack
        with self._counter_lock:
            problem.token = f"{self.session}:{next(self._counter)}"
        return {"token": problem.token, "resume": unfinished_since(problem.opened.read_pointer(), since),
                "problem_text": problem.data.decode(), "problem_name": problem.path.name}

    def _close(self, problem: _Problem) -> None:
        problem.token = None
        stack, problem.stack, problem.opened = problem.stack, None, None
        if stack is not None:
            stack.close()

    # -- the agent's log ----------------------------------------------------------------
    def _agent_log(self, key: str, lines: list[str]) -> None:
        if not isinstance(lines, list) or not all(isinstance(line, str) for line in lines):
            raise ValueError("log lines are a list of strings")
        if self.logs is None:
            for line in lines:
                self.log(f"{key}: {line}")
            return
        with open(self.logs / f"{key}.log", "a") as f:  # as a local run's log: the lines as they are
            f.writelines(f"{line}\n" for line in lines)

    # -- the repository -------------------------------------------------------------------
    def _op_info(self, opened: Any) -> dict[str, str]:
        repo = opened.repo
        return {"path": str(repo.path), "name": repo.name, "best_path": str(repo.best_path)}

    def _op_commit_attempt(self, opened: Any, source: str, result: dict[str, Any], model: str, run_id: str,
                           summary: str = "", trajectory: str | None = None,
                           extra_files: dict[str, str] | None = None, spend: dict[str, Any] | None = None,
                           lineage: list[Any] | None = None) -> Any:
        return opened.repo.commit_attempt(source, result, model=model, run_id=run_id, summary=summary,
                                          trajectory=trajectory, extra_files=extra_files, spend=spend,
                                          lineage=None if lineage is None else (lineage[0], lineage[1]))

    def _op_save_trajectory(self, opened: Any, run_id: str, text: str) -> str | None:
        return opened.repo.save_trajectory(run_id, text)

    def _op_attempts(self, opened: Any) -> list[Any]:
        return opened.repo.attempts()

    def _op_attempt(self, opened: Any, number: int) -> Any:
        return opened.repo.attempt(number)

    def _op_best(self, opened: Any) -> Any:
        return opened.repo.best()

    def _op_latest(self, opened: Any) -> Any:
        return opened.repo.latest()

    def _op_source(self, opened: Any, sha: str) -> str:
        return opened.repo.source(_known_attempt(opened.repo, sha))

    def _op_record(self, opened: Any, sha: str) -> dict[str, Any]:
        return opened.repo.record(_known_attempt(opened.repo, sha))

    # -- the checkpointer (LangGraph's SqliteSaver on the problem's checkpoint file) ------------
    def _op_get_tuple(self, opened: Any, config: dict[str, Any]) -> Any:
        return opened.saver().get_tuple(config)

    def _op_list(self, opened: Any, config: dict[str, Any] | None, filter: dict[str, Any] | None = None,  # noqa: A002
                 before: dict[str, Any] | None = None, limit: int | None = None) -> list[Any]:
        return list(opened.saver().list(config, filter=filter, before=before, limit=limit))

    def _op_put(self, opened: Any, config: dict[str, Any], checkpoint: dict[str, Any], metadata: dict[str, Any],
                new_versions: dict[str, Any]) -> dict[str, Any]:
        return opened.saver().put(config, checkpoint, metadata, new_versions)

    def _op_put_writes(self, opened: Any, config: dict[str, Any], writes: list[tuple[str, Any]], task_id: str,
                       task_path: str = "") -> None:
        opened.saver().put_writes(config, writes, task_id, task_path)

    # -- the run pointer ------------------------------------------------------------------
    def _op_read_pointer(self, opened: Any) -> dict[str, Any] | None:
        return opened.read_pointer()

    def _op_write_pointer(self, opened: Any, data: dict[str, Any]) -> None:
        if not isinstance(data, dict) or not all(isinstance(v, _SCALARS) for v in data.values()):
            raise ValueError("a run pointer is a flat JSON object")
        opened.write_pointer(data)


def _known_attempt(repo: Any, sha: str) -> Any:
    """The attempt on main whose commit is `sha` (a node names attempts by commit; only those are read)."""
    found = next((a for a in repo.attempts() if a.sha == sha), None)
    if found is None:
        raise ValueError(f"no attempt with commit {sha!r} on main")
    return found
