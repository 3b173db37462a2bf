"""A line on stderr every so often while something slow is under way (a model request).

A model that accepts a request and never answers would otherwise leave the run silent until the
request's timeout; `Heartbeat` makes the wait visible. It is a context manager around the wait:
a daemon thread writes `line(elapsed_s)` every `interval_s` seconds until the block ends.
"""
from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field


@dataclass
class Heartbeat:
    """`with Heartbeat(30.0, lambda s: f"waiting: {s:.0f} s", log): ...` logs every 30 s inside the block."""

    interval_s: float
    line: Callable[[float], str]
    log: Callable[[str], None]
    _stop: threading.Event = field(default_factory=threading.Event, init=False, repr=False)
    _thread: threading.Thread | None = field(default=None, init=False, repr=False)

    def __enter__(self) -> "Heartbeat":
        if self.interval_s > 0:
            self._stop.clear()
            self._thread = threading.Thread(target=self._beat, args=(time.monotonic(),), name="ratchet-heartbeat",
                                            daemon=True)
            self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None

    def _beat(self, start: float) -> None:
        while not self._stop.wait(self.interval_s):
            self.log(self.line(time.monotonic() - start))
