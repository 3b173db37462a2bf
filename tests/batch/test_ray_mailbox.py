"""The Ray mailbox between the nodes and the driver (agent.batch.ray_channel), on a real local Ray
instance: the driver answers different problems' requests at once, so one slot's slow commit does
not hold up another slot, and one problem's requests one after the other, in the order sent."""
from __future__ import annotations

import threading
import time

import pytest

ray = pytest.importorskip("ray")

from agent.batch.channel import Request, ServiceError  # noqa: E402
from agent.batch.ray_channel import MailboxServer, RayChannel, mailbox_actor  # noqa: E402

pytestmark = pytest.mark.timeout(120)


@pytest.fixture(scope="module")
def cluster():
    ray.init(address="local", num_cpus=1, include_dashboard=False, object_store_memory=80 << 20)
    yield
    ray.shutdown()


class Service:
    """A stand-in for the driver's WorkspaceService: records when each request starts and ends;
    ("a", "slow") waits until ("b", ...) has been answered, or gives up after `patience` s."""

    def __init__(self, patience: float = 20.0):
        self.patience = patience
        self.events: list[tuple[str, str, str]] = []  # (key, op, "start" | "end")
        self.b_done = threading.Event()
        self.lock = threading.Lock()

    def handle(self, request: Request) -> str:
        with self.lock:
            self.events.append((request.key, request.op, "start"))
        if request.op == "slow":
            waited = self.b_done.wait(self.patience)
            answer = "b was answered meanwhile" if waited else "b waited for me"
        elif request.op == "boom":
            raise RuntimeError("a bug in the service")
        else:
            time.sleep(0.05)
            answer = f"{request.key}:{request.op}"
        with self.lock:
            self.events.append((request.key, request.op, "end"))
        if request.key == "b":
            self.b_done.set()
        return answer


def call_in_thread(channel: RayChannel, request: Request, answers: dict) -> threading.Thread:
    def run() -> None:
        try:
            answers[request.op] = channel.call(request)
        except ServiceError as exc:
            answers[request.op] = exc
    thread = threading.Thread(target=run)
    thread.start()
    return thread


def wait_parked(server: MailboxServer, key: str, count: int, timeout_s: float = 30.0) -> None:
    """Until the driver holds `count` of the problem's requests unanswered (taken from the mailbox in
    the order they arrived). Two requests sent at once from two threads may arrive in either order."""
    deadline = time.monotonic() + timeout_s
    while True:
        with server._lock:
            if len(server._queues.get(key, ())) >= count:
                return
        assert time.monotonic() < deadline, f"{count} requests of {key} never reached the driver"
        time.sleep(0.01)


def test_two_problems_are_answered_at_once_and_one_problems_requests_in_order(cluster):
    service = Service()
    mailbox = mailbox_actor()
    server = MailboxServer(mailbox, service.handle)
    channel = RayChannel(mailbox, timeout_s=60)
    answers: dict = {}
    try:
        slow = call_in_thread(channel, Request("a", "t", "slow"), answers)
        deadline = time.monotonic() + 30
        while ("a", "slow", "start") not in service.events:
            assert time.monotonic() < deadline, "the first request was never served"
            time.sleep(0.01)
        after = []
        for parked, op in enumerate(("second", "third"), start=2):  # sent one after the other, as a problem does
            after.append(call_in_thread(channel, Request("a", "t", op), answers))
            wait_parked(server, "a", parked)
        other = call_in_thread(channel, Request("b", "t", "commit"), answers)
        for thread in (slow, *after, other):
            thread.join(60)
    finally:
        server.stop()
    assert answers["slow"] == "b was answered meanwhile"  # b did not queue behind a's slow request
    assert answers["commit"] == "b:commit"
    assert answers["second"] == "a:second" and answers["third"] == "a:third"
    a_events = [(op, what) for key, op, what in service.events if key == "a"]
    assert a_events == [("slow", "start"), ("slow", "end"), ("second", "start"), ("second", "end"),
                        ("third", "start"), ("third", "end")]
    assert server.served == 4


def test_a_bug_in_the_service_is_one_line_to_the_node_and_the_problem_goes_on(cluster):
    service = Service()
    mailbox = mailbox_actor()
    server = MailboxServer(mailbox, service.handle)
    channel = RayChannel(mailbox, timeout_s=60)
    try:
        with pytest.raises(ServiceError, match=r"^a: boom: RuntimeError: a bug in the service$"):
            channel.call(Request("a", "t", "boom"))
        assert channel.call(Request("a", "t", "next")) == "a:next"
    finally:
        server.stop()
