"""The node side of a batch on a cluster: one problem's agent run whose workspace is the driver's.

Read agent/batch/channel.py first (the contract). `run_remote_problem(spec, channel) -> row` is
what an executor runs on a node: it takes the problem's lease from the driver's
agent.batch.service, writes the problem's text (which came with the lease) into a private
scratch directory under the driver's file name, and runs the same agent loop as a local batch
(agent.batch.problem.agent_row -> agent.loop.runner.optimize), resuming where the lease says an
unfinished run waits, with a store (agent.loop.run_store) whose repository, checkpointer and run
pointer are requests over the channel:

- `RemoteRepo`: the part of the repository API the agent uses (commit_attempt, save_trajectory,
  attempts, attempt, best, latest, source, record; path, name, best_path);
- `RemoteSaver`: a LangGraph checkpointer whose reads and writes are the driver's SqliteSaver's
  (channel versions are made here, as SqliteSaver makes them).

Nothing on the node outlives the run but its row: the evaluator runs here, every attempt is
committed there the moment it is judged. The row is a local row's plus `executor`
(spec["executor"]) and `node` (spec["node"], else this host); `gpu` is spec["gpu"] where given.
A run that loses its lease (`Fenced`: the driver gave the problem to another task) stops at its
next request and returns a row with status `fenced`, which the driver discards.

Logs: each log line of the run goes to this process's stderr, prefixed with the problem's key
(on a Ray node, the worker's `logs/worker-*.err`: kept for when the driver is gone), and, while
the run holds its lease, to the driver as a `log` request under the lease's token, which appends
it to the run directory's `logs/<key>.log` as a local run does. One request per line (the agent
logs a few lines per attempt), sent from the agent's own thread. A line never fails the run: once
the lease is taken (`Fenced`) the lines stay here, and the run stops at its next workspace request;
any other failure to send a line is said once on stderr and the next line is sent anyway.
"""
from __future__ import annotations

import socket
import sys
import tempfile
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from langgraph.checkpoint.base import BaseCheckpointSaver, ChannelVersions, Checkpoint, CheckpointMetadata, CheckpointTuple
from langgraph.checkpoint.sqlite import SqliteSaver

from agent.batch.channel import Channel, Fenced, Request
from agent.workspace.attempt import Attempt

_SCALARS = (str, int, float, bool, type(None))


class _Caller:
    """Sends one problem's requests under its lease token."""

    def __init__(self, channel: Channel, key: str, token: str):
        self.channel, self.key, self.token = channel, key, token

    def __call__(self, op: str, **args: Any) -> Any:
        return self.channel.call(Request(self.key, self.token, op, args))


class _DriverLog:
    """Sends a run's log lines to the driver's `logs/<key>.log` (the `log` op) under its lease; see
    the module docstring. `token` is the lease's while it is held, else None (lines stay on the node)."""

    def __init__(self, channel: Channel, key: str):
        self.channel, self.key = channel, key
        self.token: str | None = None
        self._warned = False

    def __call__(self, line: str) -> None:
        if self.token is None:
            return
        try:
            self.channel.call(Request(self.key, self.token, "log", {"lines": [line]}))
        except Fenced:
            self.token = None  # refused like the run's writes: its next workspace request stops it
        except Exception as exc:  # noqa: BLE001 - a log line must never fail the run; said once, on stderr
            if not self._warned:
                self._warned = True
                reason = " ".join(f"{type(exc).__name__}: {exc}".split())[:300]
                print(f"[{self.key}] batch: a log line did not reach the driver's logs/{self.key}.log ({reason}); "
                      "every line stays on this node's stderr", file=sys.stderr, flush=True)


class RemoteRepo:
    """The repository API the agent uses (agent.loop.nodes, agent.loop.turns, agent.loop.runner), each call a
    request to the driver's workspace."""

    def __init__(self, call: _Caller):
        self._call = call
        self._info: dict[str, str] | None = None

    def _about(self, field: str) -> str:
        if self._info is None:
            self._info = self._call("info")
        return self._info[field]

    @property
    def path(self) -> Path:
        """The repository's path on the driver (for the record; nothing here reads it)."""
        return Path(self._about("path"))

    @property
    def name(self) -> str:
        return self._about("name")

    @property
    def best_path(self) -> Path:
        return Path(self._about("best_path"))

    def commit_attempt(self, source: str, result: Any, *, model: str, run_id: str, summary: str = "",
                       trajectory: str | None = None, extra_files: dict[str, str] | None = None,
                       spend: dict[str, Any] | None = None, lineage: tuple[int, int | None] | None = None) -> Attempt:
        record = result if isinstance(result, dict) else result.to_dict()
        return self._call("commit_attempt", source=source, result=record, model=model, run_id=run_id,
                          summary=summary, trajectory=trajectory, extra_files=extra_files, spend=spend,
                          lineage=None if lineage is None else list(lineage))

    def save_trajectory(self, run_id: str, text: str) -> str | None:
        return self._call("save_trajectory", run_id=run_id, text=text)

    def attempts(self) -> list[Attempt]:
        return self._call("attempts")

    def attempt(self, number: int) -> Attempt | None:
        return self._call("attempt", number=number)

    def best(self) -> Attempt | None:
        return self._call("best")

    def latest(self) -> Attempt | None:
        return self._call("latest")

    def source(self, attempt: Attempt) -> str:
        return self._call("source", sha=attempt.sha)

    def record(self, attempt: Attempt) -> dict[str, Any]:
        return self._call("record", sha=attempt.sha)


def _plain_config(config: Any) -> dict[str, Any] | None:
    """What of a RunnableConfig a checkpointer reads: the scalar `configurable` and `metadata`
    entries, not LangGraph's internal ones (`__pregel_*`: live objects that do not travel). The
    SQLite checkpointer keeps exactly these (langgraph.checkpoint.base.get_checkpoint_metadata)."""
    if config is None:
        return None
    out: dict[str, Any] = {}
    for part in ("configurable", "metadata"):
        values = config.get(part)
        if values:
            out[part] = {k: v for k, v in values.items() if not k.startswith("__") and isinstance(v, _SCALARS)}
    return out


class RemoteSaver(BaseCheckpointSaver[str]):
    """A LangGraph checkpointer whose storage is the driver's SqliteSaver on the problem's file."""

    get_next_version = SqliteSaver.get_next_version  # versions made here exactly as the driver's saver would

    def __init__(self, call: _Caller):
        super().__init__()
        self._call = call

    def get_tuple(self, config: Any) -> CheckpointTuple | None:
        return self._call("get_tuple", config=_plain_config(config))

    def list(self, config: Any, *, filter: dict[str, Any] | None = None, before: Any = None,  # noqa: A002
             limit: int | None = None) -> Iterator[CheckpointTuple]:
        return iter(self._call("list", config=_plain_config(config), filter=filter, before=_plain_config(before),
                               limit=limit))

    def put(self, config: Any, checkpoint: Checkpoint, metadata: CheckpointMetadata,
            new_versions: ChannelVersions) -> dict[str, Any]:
        return self._call("put", config=_plain_config(config), checkpoint=checkpoint, metadata=dict(metadata),
                          new_versions=dict(new_versions))

    def put_writes(self, config: Any, writes: Sequence[tuple[str, Any]], task_id: str, task_path: str = "") -> None:
        self._call("put_writes", config=_plain_config(config), writes=list(writes), task_id=task_id,
                   task_path=task_path)


class RemoteProblem:
    """A problem opened in the driver's workspace (agent.loop.run_store.OpenedProblem)."""

    def __init__(self, call: _Caller):
        self._call = call
        self.repo = RemoteRepo(call)
        self._saver: RemoteSaver | None = None

    def saver(self) -> RemoteSaver:
        if self._saver is None:
            self._saver = RemoteSaver(self._call)
        return self._saver

    def read_pointer(self) -> dict[str, Any] | None:
        return self._call("read_pointer")

    def write_pointer(self, data: dict[str, Any]) -> None:
        self._call("write_pointer", data=data)


class RemoteStore:
    """agent.loop.run_store's Store over a channel: every problem it opens is the leased one."""

    def __init__(self, call: _Caller):
        self._call = call

    @contextmanager
    def open(self, problem: Path) -> Iterator[RemoteProblem]:
        yield RemoteProblem(self._call)


def run_remote_problem(spec: dict[str, Any], channel: Channel, pools: Any = None) -> dict[str, Any]:
    """Run (or continue) the agent on the spec's problem, committing into the driver's workspace
    through `channel`; return its row (see the module docstring). Never raises for what the
    problem, the model, the workspace or the lease does: those end as a row with a status.
    `pools`: the slot's warm pools (tools.processes.warm.WarmPools), kept from one problem to the next."""
    from agent.batch.problem import agent_row, problem_row

    key = spec["key"]
    driver_log = _DriverLog(channel, key)

    def log(line: str) -> None:
        print(f"[{key}] {line}", file=sys.stderr, flush=True)
        driver_log(line)

    def work() -> dict[str, Any]:
        lease = channel.call(Request(key, None, "acquire", {"since": spec.get("since")}))
        driver_log.token = lease["token"]
        call = _Caller(channel, key, lease["token"])
        with tempfile.TemporaryDirectory(prefix="ratchet-remote-") as scratch:
            problem = Path(scratch) / lease["problem_name"]
            problem.write_bytes(lease["problem_text"].encode())
            row = agent_row(spec, log, problem=problem, resume=bool(spec.get("resume")) and lease["resume"],
                            store=RemoteStore(call), pools=pools)
        driver_log.token = None  # the lease ends here
        call("release")
        return row

    return problem_row(spec, work, log, executor=spec.get("executor") or "ray",
                       node=spec.get("node") or socket.gethostname(), gpu=spec.get("gpu"))
