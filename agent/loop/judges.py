"""The evaluators a run judges on: one per device (`--device cuda:0,cuda:1`), each judging one
candidate at a time, so that a wide step's candidates are judged at once on several cards while
timing keeps each card to itself (docs/integrity.md). With one device this is a lock around its
one evaluator, as before.

A candidate takes a free evaluator for its whole evaluation (`take`), the first free one in device
order: at width 1 every candidate is judged on the first device, so consecutive attempts compare
on one card. get_ncu_profile (agent/loop/counters.py) takes one the same way: its replay must not
share a card with timing. Every evaluator is of the same problem and options; the first is the
run's own (its baseline, the problem it reads).
"""
from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from typing import Any


class Judges:
    def __init__(self, evaluators: list[Any]) -> None:
        if not evaluators:
            raise ValueError("a run judges on at least one evaluator")
        self.all = list(evaluators)
        self._busy = [False] * len(self.all)
        self._free = threading.Condition()
        # a source being judged now, and its committed-twin check: one caller at a time per source,
        # so a source two branches send is judged once (the second finds the first's commit), and
        # one whose judging failed (an evaluator fault is not a commit that counts) is judged again
        # by one waiter, not by all at once
        self._claims: dict[str, threading.Event] = {}
        self._claims_lock = threading.Lock()

    @contextlib.contextmanager
    def take(self) -> Iterator[Any]:
        """The first free evaluator in device order, this caller's alone until the block ends
        (waits for one)."""
        with self._free:
            self._free.wait_for(lambda: not all(self._busy))
            index = self._busy.index(False)
            self._busy[index] = True
        try:
            yield self.all[index]
        finally:
            with self._free:
                self._busy[index] = False
                self._free.notify()

    @contextlib.contextmanager
    def claim(self, source_hash: str) -> Iterator[None]:
        """`source_hash` to this caller alone until the block ends (waits while another holds it)."""
        while True:
            with self._claims_lock:
                running = self._claims.get(source_hash)
                if running is None:
                    mine = self._claims[source_hash] = threading.Event()
                    break
            running.wait()
        try:
            yield
        finally:
            with self._claims_lock:
                del self._claims[source_hash]
            mine.set()
