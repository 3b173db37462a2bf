"""Where an agent run keeps what outlives it: the problem's repository, the graph's checkpoints
and the run pointer. The seam between agent.loop.runner and storage.

`optimize()` opens a problem through a store and uses only what the opened problem offers:

    with store.open(problem) as opened:
        opened.repo                  # the repository API the agent uses (agent.workspace.root.ProblemRepo)
        opened.saver()               # a LangGraph checkpointer (made on first use)
        opened.read_pointer()        # the run pointer: {"run_id", "problem", "finished", "started_at"} or None
        opened.write_pointer(data)

`LocalStore` is the workspace on this machine: a `Workspace` repository, LangGraph's
`SqliteSaver` on `<root>/.ratchet/<name>.sqlite` and the pointer file `<root>/.ratchet/<name>.run.json`
(what `ratchet optimize` and a local batch use). agent.batch.remote's store performs the same
operations over a channel to the driver's agent.batch.service, which performs them with a
`LocalStore` on the driver's workspace.
"""
from __future__ import annotations

import json
import os
import sqlite3
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any, ContextManager, Protocol

STATE_DIR = ".ratchet"


def pointer_path(repo: Any) -> Path:
    """The run pointer of a problem's repository (`<root>/.ratchet/<name>.run.json`)."""
    return Path(repo.path).parent / STATE_DIR / f"{repo.name}.run.json"


class OpenedProblem(Protocol):
    repo: Any

    def saver(self) -> Any: ...

    def read_pointer(self) -> dict[str, Any] | None: ...

    def write_pointer(self, data: dict[str, Any]) -> None: ...


class Store(Protocol):
    def open(self, problem: Path) -> ContextManager[OpenedProblem]: ...


class LocalProblem:
    """A problem opened in a workspace on this machine (see the module docstring)."""

    def __init__(self, repo: Any, stack: ExitStack):
        self.repo = repo
        self._stack = stack
        self._saver: Any = None
        self.state_dir = Path(repo.path).parent / STATE_DIR
        self.state_dir.mkdir(parents=True, exist_ok=True)
        self.pointer_path = pointer_path(repo)

    def saver(self) -> Any:
        """LangGraph's SqliteSaver on the problem's checkpoint file, connected on first use (so that
        a run that ends before its graph starts leaves no checkpoint file behind)."""
        if self._saver is None:
            from langgraph.checkpoint.sqlite import SqliteSaver

            connection = sqlite3.connect(self.state_dir / f"{self.repo.name}.sqlite", check_same_thread=False)
            self._stack.callback(connection.close)
            self._saver = SqliteSaver(connection)
        return self._saver

    def read_pointer(self) -> dict[str, Any] | None:
        return read_json(self.pointer_path)

    def write_pointer(self, data: dict[str, Any]) -> None:
        write_json(self.pointer_path, data)


class LocalStore:
    """The workspace under `root` on this machine."""

    def __init__(self, root: str | os.PathLike | None):
        self.root = root

    @contextmanager
    def open(self, problem: Path, *, data: bytes | None = None) -> Iterator[LocalProblem]:
        """Open (creating on first use) the problem's repository for writing. `data`: the problem
        file's bytes where the caller holds them already (the path then only names the file)."""
        from agent.workspace.root import Workspace

        with ExitStack() as stack:
            repo = stack.enter_context(Workspace(self.root).open_problem(problem, data=data))
            yield LocalProblem(repo, stack)


def read_json(path: Path) -> dict[str, Any] | None:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def write_json(path: Path, data: dict[str, Any]) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(data, indent=1) + "\n")
    os.replace(tmp, path)
