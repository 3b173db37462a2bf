"""The evaluators a run judges on: one per device (`--device cuda:0,cuda:1`), each judging one
candidate at a time, so that a wide step's candidates are judged at once on several cards while
timing keeps each card to itself (docs/integrity.md). With one device this is a lock around its
one evaluator, as before.

A candidate takes a free evaluator for its whole evaluation (`take`); so does get_ncu_profile
(agent/loop/counters.py), whose replay must not share a card with timing. Every evaluator is of
the same problem and options; the first is the run's own (its baseline, the problem it reads).
"""
from __future__ import annotations

import contextlib
import queue
import threading
from collections.abc import Iterator
from typing import Any


class Judges:
    def __init__(self, evaluators: list[Any]) -> None:
        if not evaluators:
            raise ValueError("a run judges on at least one evaluator")
        self.all = list(evaluators)
        self._free: queue.SimpleQueue[Any] = queue.SimpleQueue()
        for evaluator in self.all:
            self._free.put(evaluator)
        # a source being judged now: a branch that sends the same source waits for its commit and
        # reuses it (judged once), as the one lock did when one candidate was judged at a time
        self.claims: dict[str, threading.Event] = {}
        self.claims_lock = threading.Lock()

    @contextlib.contextmanager
    def take(self) -> Iterator[Any]:
        """A free evaluator, this caller's alone until the block ends (waits for one)."""
        evaluator = self._free.get()
        try:
            yield evaluator
        finally:
            self._free.put(evaluator)

    @contextlib.contextmanager
    def claim(self, source_hash: str) -> Iterator[bool]:
        """True: this caller judges `source_hash` (others wait for it to end); False: another caller
        was judging it and has ended (look for its commit)."""
        with self.claims_lock:
            running = self.claims.get(source_hash)
            if running is None:
                mine = self.claims[source_hash] = threading.Event()
        if running is not None:
            running.wait()
            yield False
            return
        try:
            yield True
        finally:
            with self.claims_lock:
                del self.claims[source_hash]
            mine.set()
