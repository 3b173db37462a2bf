"""How an agent run on another machine writes into the driver's workspace: the contract.

In a batch spread over a cluster (`ratchet batch --ray`), the agent loop of a problem runs
wherever the cluster places it, but the workspace it commits to is the one on the machine where
`ratchet batch` was started: nothing requires a shared file system. The node side
(agent.batch.remote) has no workspace of its own; every read and write of the problem's
repository and of the graph's checkpoints, and every line of its agent log (which the driver
appends to the run directory's `logs/<problem>.log`), is a request over a `Channel` to the driver's
`WorkspaceService` (agent.batch.service), which performs it on the real workspace with the same
code as a local run (attempt numbers, trailers, the "best" rule, LangGraph's SQLite checkpoints
under `<root>/.ratchet/`). So `ratchet log`, `best`, `report` and `--resume` see one truth.

Fencing: before its first write, a node-side run takes the problem's lease (`acquire`), which
returns a token; every later request carries it. Taking the lease again (a retry of a task
presumed dead) issues a new token, and the service refuses every request made with an older one
(`Fenced`): a problem never commits from two places at once, even when the old task is still
running. Tokens name the driver's session, so a task left over from an earlier session of the
same run is refused too.

A request is `Request(key, token, op, args)`; the service answers with the op's return value or
raises. What crosses a channel must pickle (Ray pickles it; `LocalChannel` round-trips it through
pickle, so the CPU tests check that too).
"""
from __future__ import annotations

import pickle
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from agent.workspace.repo import WorkspaceError


class Fenced(WorkspaceError):
    """This run no longer holds the problem's lease (another run took it): its writes are refused."""


class ServiceError(WorkspaceError):
    """A request the service could not carry out; str() is one line naming the problem and the op."""


@dataclass(frozen=True)
class Request:
    key: str  # the problem's key (agent.batch.problem.problem_key)
    token: str | None  # the lease token; None only for `acquire`
    op: str  # a WorkspaceService operation (agent.batch.service.OPS)
    args: dict[str, Any] = field(default_factory=dict)


@runtime_checkable
class Channel(Protocol):
    """Carries one request to the driver's WorkspaceService and brings its answer back.
    Raises what the service raised (Fenced, ServiceError, WorkspaceError subclasses)."""

    def call(self, request: Request) -> Any: ...


class LocalChannel:
    """A channel to a service in this process, every request and answer round-tripped through
    pickle as a remote one would be. For tests, and for any executor that shares the driver's
    process."""

    def __init__(self, service: Any):
        self.service = service

    def call(self, request: Request) -> Any:
        request = pickle.loads(pickle.dumps(request))
        try:
            answer = self.service.handle(request)
        except WorkspaceError as exc:
            raise pickle.loads(pickle.dumps(exc)) from None
        return pickle.loads(pickle.dumps(answer))
