"""Requests sent ahead (config `ahead`, `--ahead on`; docs/search.md "Ahead"): in a wide step, a
lineage's next request goes out as soon as its own candidate is judged, before the step's fan-in.

Without it a step's fan-in waits for every lineage's reply and judgment, and only then do the next
step's requests leave: the GPU idles while they are out, and the model idles while the step's last
candidates are judged. With it, each branch, once judged (its `report`), answers its own outcome
and sends the lineage's next request at once, if the lineage ranks within the beam among the
step's candidates judged so far. The next step's `ask` takes the reply that waits for exactly its
request (the same messages as sent, the same tools, the same seed); any other request goes out as
before.

- What the answer says: the outcome, the run's best as of this branch's report (a sibling judged
  later may pass it) and the attempts left after the step. `refine` carries that same answer into
  the lineage's conversation (`Lineage.answer`), so the conversation is what was sent.
- Unused: a request sent for a lineage that a sibling judged later pushed out of the beam, or one
  out when the run stopped (patience, the roofline, the wall budget). Its tokens and dollars count
  as the run's, in no attempt (a turn with `ahead: "unused"`) once its reply is in; at the run's
  end the runner waits for those still out (`finish`). None is sent where the step is the run's
  last by the attempt budget, or where a correct kernel ends an untimed run.
- Resume: nothing sent ahead outlives its process; a resumed run asks again.
- Width 1: nothing to gain (a single line has no fan-in to wait for): `ahead` is not used.
"""
from __future__ import annotations

import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from agent.loop.beam import as_attempt, kept, rank
from agent.loop.state import AttemptSummary, Branch, Message, TurnUsage
from agent.loop.turns import call_model, feedback_message, request_key, request_of, turn_usage
from agent.workspace.attempt import beats
from tools.record import describe_exception

if TYPE_CHECKING:
    from agent.loop.session import Session


@dataclass
class Sent:
    """One request sent ahead: its lineage, its key, what it sent (approximate tokens), its reply."""

    lineage: int
    key: str
    sent_tokens: int
    reply: Future = field(default_factory=Future)  # -> (reply, seconds), or the call's exception


class Board:
    """What a step knows so far, for the branches deciding whether to send ahead: the run's best
    as its candidates are reported, and the rank of each reported lineage."""

    def __init__(self) -> None:
        self.step: tuple[str, int] | None = None  # (run id, attempts used as the step began)
        self.best: AttemptSummary | None = None
        self.ranks: list[tuple[int, float, int]] = []
        self._lock = threading.Lock()  # the step's branches report from LangGraph's threads

    def start(self, step: tuple[str, int], best: AttemptSummary | None) -> None:
        with self._lock:
            self.step, self.best, self.ranks = step, best, []

    def report(self, step: tuple[str, int], place: tuple[int, float, int],
               latest: AttemptSummary | None) -> tuple[int, AttemptSummary | None] | None:
        """This lineage's place among the step's reported ones (0: the best), and the run's best now;
        None where the board is not this step's (a step resumed in its middle: its board is gone)."""
        with self._lock:
            if step != self.step:
                return None
            self.ranks.append(place)
            if latest is not None and latest["verdict"] == "ok" and (
                    self.best is None or beats(as_attempt(latest), as_attempt(self.best))):
                self.best = latest
            return sorted(self.ranks).index(place), self.best


class Ahead:
    """The requests a run has out ahead, by lineage, and the replies nobody took."""

    def __init__(self) -> None:
        self.board = Board()
        self._lock = threading.Lock()
        self._sent: dict[int, Sent] = {}
        self._unused: list[Sent] = []  # dropped: counted once their replies are in

    def send(self, lineage: int, key: str, sent_tokens: int, call: Callable[[], Any]) -> None:
        """Send `call()` (the model request) now, in a thread of its own (a daemon: an interrupted
        run does not wait for it)."""
        sent = Sent(lineage, key, sent_tokens)

        def run() -> None:
            start = time.monotonic()
            try:
                reply = call()
            except BaseException as exc:  # noqa: BLE001 - handed to whoever takes the reply (ModelError), as the call would raise
                sent.reply.set_exception(exc)
                return
            sent.reply.set_result((reply, time.monotonic() - start))

        with self._lock:
            earlier = self._sent.pop(lineage, None)
            if earlier is not None:
                self._unused.append(earlier)
            self._sent[lineage] = sent
        threading.Thread(target=run, name=f"ahead-{lineage}", daemon=True).start()

    def take(self, lineage: int, key: str) -> tuple[Any, float] | None:
        """The reply (and its seconds) of the request sent ahead for exactly this one, waiting for
        it; None when none was. Raises what the call raised."""
        with self._lock:
            sent = self._sent.get(lineage)
            if sent is None or sent.key != key:
                return None
            del self._sent[lineage]
        return sent.reply.result()

    def keep(self, lineages: set[int]) -> None:
        """Requests out for other lineages than these (the next step's continuing ones) are unused."""
        with self._lock:
            for lineage in [k for k in self._sent if k not in lineages]:
                self._unused.append(self._sent.pop(lineage))

    def unused(self, *, wait: bool = False) -> list[tuple[Sent, Any, float, BaseException | None]]:
        """The unused requests that have ended (with `wait`: every one, waiting for those still
        out), each once: (request, reply, seconds, None), or (request, None, 0, what it raised)
        for one that failed, which brought no reply and no counted tokens."""
        with self._lock:
            if wait:
                self._unused.extend(self._sent.values())
                self._sent.clear()
            pending = list(self._unused)
        done: list[tuple[Sent, Any, float, BaseException | None]] = []
        for sent in pending:
            if not wait and not sent.reply.done():
                continue
            error = sent.reply.exception()  # waits for it
            if error is None:
                reply, seconds = sent.reply.result()
                done.append((sent, reply, seconds, None))
            else:
                done.append((sent, None, 0.0, error))
            with self._lock:
                self._unused.remove(sent)
        return done

    def out(self) -> int:
        with self._lock:
            return len(self._sent) + sum(1 for s in self._unused if not s.reply.done())


def send_ahead(state: Branch, ctx: Session) -> Message | None:
    """A judged branch's next request, sent now where its lineage ranks within the beam so far;
    the answer it was sent with (the lineage's conversation takes it), else None. The caller has
    checked that another step can follow (the attempt budget, an untimed run's first correct kernel)."""
    ahead = ctx.ahead
    if ahead is None or state.get("proposal") is None:
        return None
    origin, latest = state["origin"], state.get("latest")
    seen = ahead.board.report((state["run_id"], origin["attempts_used"]),
                              rank({"latest": latest, "id": state["lineage"]}),  # type: ignore[typeddict-item]
                              latest)
    if seen is None or seen[0] >= kept(ctx.config):
        return None
    best = seen[1]
    told = {**state, "best": best, "attempts_used": origin["attempts_used"] + state["step_size"],
            "improved": bool(best and latest and best["attempt"] == latest["attempt"])}
    answer = feedback_message(told, ctx)  # type: ignore[arg-type]
    view, sent_tokens = request_of(list(state["messages"]) + [answer], ctx)
    seed = state.get("seed")
    ahead.send(state["lineage"], request_key(view, ctx.tools, seed), sent_tokens, lambda: call_model(ctx, view, seed)[0])
    return answer


def unused_turns(ctx: Session, *, wait: bool = False) -> list[TurnUsage]:
    """The run's unused requests sent ahead, as turns of no conversation (`ahead: "unused"`, turn
    0) that count in its tokens and cost; with `wait`, every one still out is waited for. One that
    failed is said in the log and counts nothing (no reply, no usage)."""
    if ctx.ahead is None:
        return []
    turns = []
    for sent, reply, seconds, error in ctx.ahead.unused(wait=wait):
        if error is not None:
            ctx.log(f"a request sent ahead for lineage {sent.lineage} failed, and was not needed: "
                    f"{describe_exception(error)}")
            continue
        turn = turn_usage(reply, seconds, sent.sent_tokens, ctx, turn=0)
        turn["ahead"] = "unused"
        turns.append(turn)
    return turns


def with_unused(values: dict[str, Any], unused: list[TurnUsage]) -> dict[str, Any]:
    """`values` (a run's state, or select's update of it) with the unused turns added to its usage
    and tokens; an attempt's trailer never carries them (`billed_turns` past them)."""
    usage = list(values.get("usage") or []) + unused
    return {**values, "usage": usage, "billed_turns": len(usage),
            "tokens_used": values.get("tokens_used", 0) + sum(t["tokens"] for t in unused)}
