"""The Ray channel: node-side requests carried to the driver's WorkspaceService, and back.

A batch on a Ray cluster (agent.batch.ray_slots) runs each problem's agent loop on whatever node Ray
places it, but only the driver's process touches the workspace (agent/batch/channel.py says
why). The transport has two halves and one actor between them:

- `Mailbox`, an async Ray actor (no CPU of its own) owned by the driver: `call(request)` parks a
  node's request and waits for its answer; `take(timeout)` hands the driver every parked request
  (a long poll: it returns as soon as one arrives, or empty after `timeout`); `answer(id,
  outcome)` wakes the waiting call. An actor rather than a server socket, so it works the same
  whether the driver runs on the head node (`--ray local`, `auto`) or outside the cluster as a Ray
  Client (`ray://HOST:PORT`): every connection goes out from the driver and the nodes into Ray.
- `MailboxServer`, a thread in the driver's process: it takes requests and runs
  `service.handle(request)` on a few threads, one problem at a time on each: a problem's requests
  are answered one after the other in the order they were taken, while different problems' are
  served at once (the service locks per problem), so one slot's commit never waits behind another
  slot's. It posts each outcome, an exception included: a `Fenced` raised by the service arrives
  on the node as `Fenced`, any other WorkspaceError as itself, a bug in the service as one
  `ServiceError` line naming the problem and the op.
- `RayChannel`, the node side (an agent.batch.channel.Channel): `call(request)` sends it through
  the mailbox and waits (at most `timeout_s`) for the outcome. It waits on the reference's
  future, not in `ray.get`, so Ray does not count the task as blocked and hand its CPU slot to
  another problem meanwhile.

The driver's death ends the actor (it is not detached), and with it every waiting call.
"""
from __future__ import annotations

import asyncio
import collections
import concurrent.futures
import itertools
import threading
from collections.abc import Callable
from typing import Any

from agent.batch.channel import Request, ServiceError
from agent.workspace.repo import WorkspaceError

CALL_TIMEOUT_S = 600.0  # one request's round trip; the service answers in seconds (a commit, a checkpoint)
POLL_S = 1.0  # the driver's long poll; also how soon its thread notices stop()
SERVICE_THREADS = 8  # problems whose requests the driver answers at once (a slot runs one problem)


class Mailbox:
    """The actor between the nodes and the driver (see the module docstring). Made a Ray actor
    class by `mailbox_actor()`, so that importing this module needs no Ray."""

    def __init__(self) -> None:
        self._parked: asyncio.Queue = asyncio.Queue()
        self._waiting: dict[int, asyncio.Future] = {}
        self._ids = itertools.count(1)

    async def call(self, request: Request) -> tuple[str, Any]:
        number = next(self._ids)
        answer = asyncio.get_running_loop().create_future()
        self._waiting[number] = answer
        await self._parked.put((number, request))
        try:
            return await answer
        finally:
            self._waiting.pop(number, None)

    async def take(self, timeout: float) -> list[tuple[int, Request]]:
        try:
            first = await asyncio.wait_for(self._parked.get(), timeout)
        except asyncio.TimeoutError:
            return []
        taken = [first]
        while not self._parked.empty():
            taken.append(self._parked.get_nowait())
        return taken

    async def answer(self, number: int, outcome: tuple[str, Any]) -> None:
        waiting = self._waiting.get(number)
        if waiting is not None and not waiting.done():  # gone: the caller's task was cancelled
            waiting.set_result(outcome)


def mailbox_actor(name: str | None = None) -> Any:
    """Start the mailbox actor (owned by this driver; it dies with it)."""
    import ray

    options: dict[str, Any] = {"num_cpus": 0, "max_concurrency": 1000}
    if name:
        options["name"] = name
    return ray.remote(Mailbox).options(**options).remote()


def outcome_of(handle: Callable[[Request], Any], request: Request) -> tuple[str, Any]:
    """What the service made of a request, as the mailbox carries it: ("ok", answer) or
    ("raise", exception). Only WorkspaceError and its subclasses (Fenced) travel as themselves."""
    try:
        return "ok", handle(request)
    except WorkspaceError as exc:
        return "raise", exc
    except Exception as exc:  # noqa: BLE001 - a bug in the service: the node gets one line, the driver goes on
        return "raise", ServiceError(f"{request.key}: {request.op}: {type(exc).__name__}: {exc}")


class MailboxServer:
    """The driver's side of the mailbox: a thread that takes requests, and up to `threads` threads
    that answer them with `handle` (a WorkspaceService's), each request of one problem after the
    one before it, in the order taken (see the module docstring)."""

    def __init__(self, mailbox: Any, handle: Callable[[Request], Any], *,
                 warn: Callable[[str], None] = lambda line: None, threads: int = SERVICE_THREADS):
        self.mailbox = mailbox
        self.handle = handle
        self.warn = warn
        self.served = 0
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._queues: dict[str, collections.deque] = {}  # problem key -> its requests not yet answered
        self._pool = concurrent.futures.ThreadPoolExecutor(max_workers=threads, thread_name_prefix="ray-service")
        self._lost = threading.Event()  # warned once that answers cannot be posted
        self._thread = threading.Thread(target=self._serve, name="ray-mailbox", daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        import ray

        while not self._stop.is_set():
            try:
                taken = ray.get(self.mailbox.take.remote(POLL_S))
            except Exception as exc:  # noqa: BLE001 - the actor or the connection is gone: say so once, stop serving
                if not self._stop.is_set():
                    self.warn(f"batch: the Ray mailbox stopped answering ({type(exc).__name__}: {exc}); "
                              "running problems will fail and --resume continues them")
                return
            for number, request in taken:
                self._enqueue(number, request)

    def _enqueue(self, number: int, request: Request) -> None:
        """Queue a request behind its problem's unanswered ones; start a drain if there are none."""
        key = request.key
        with self._lock:
            queue = self._queues.get(key)
            if queue is not None:  # a drain of this problem is running: it will get to this one
                queue.append((number, request))
                return
            self._queues[key] = collections.deque([(number, request)])
        self._pool.submit(self._drain, key)

    def _drain(self, key: str) -> None:
        """Answer the problem's requests in order until none is left (then forget its queue)."""
        while True:
            with self._lock:
                queue = self._queues[key]
                if not queue:
                    del self._queues[key]
                    return
                number, request = queue[0]
            outcome = outcome_of(self.handle, request)
            try:
                self.mailbox.answer.remote(number, outcome)
            except Exception as exc:  # noqa: BLE001 - Ray is gone (the end of the driver): the node's call times out
                if not self._lost.is_set():
                    self._lost.set()
                    self.warn(f"batch: an answer could not be posted to the Ray mailbox ({type(exc).__name__}: {exc})")
            with self._lock:
                queue.popleft()
                self.served += 1

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=POLL_S + 10)
        self._pool.shutdown(wait=True)


class RayChannel:
    """The node side of the transport: an agent.batch.channel.Channel over the mailbox."""

    def __init__(self, mailbox: Any, timeout_s: float = CALL_TIMEOUT_S):
        self.mailbox = mailbox
        self.timeout_s = timeout_s

    def call(self, request: Request) -> Any:
        future = self.mailbox.call.remote(request).future()
        try:
            kind, value = future.result(timeout=self.timeout_s)
        except concurrent.futures.TimeoutError:
            raise ServiceError(f"{request.key}: {request.op}: the driver did not answer within "
                               f"{self.timeout_s:.0f} s") from None
        except Exception as exc:  # noqa: BLE001 - RayActorError & co: the driver (which owns the actor) is gone
            raise ServiceError(f"{request.key}: {request.op}: the driver's mailbox is gone "
                               f"({type(exc).__name__})") from None
        if kind == "raise":
            raise value
        return value
