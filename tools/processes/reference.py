"""The reference worker: the problem's own Model in one long-lived worker per evaluator, its
outputs cached per (seed, distribution), and restarted when it dies.

Batch and RL runs evaluate thousands of candidates against one reference worker, so its death
(the OOM killer, a device reset, a bug of ours) must neither end the evaluator nor be charged to
the candidate that happened to be running: a death between evaluations is repaired before the
next one starts; a death during one raises `ReferenceLost`, which the evaluator answers by
restarting the reference and evaluating that candidate once more, from a fresh worker.
"""
from __future__ import annotations

import math
import re
from collections.abc import Callable
from typing import Any

from tools.problem import ProblemError, ProblemInfo, apply_description
from tools.processes.process import WorkerGone, WorkerProcess


# how a failed allocation reads when it is not torch's OutOfMemoryError (cuBLAS's workspace, the CUDA
# runtime's, a kernel's local memory): the float64 evaluation's RuntimeError then names it
MEMORY_ERRORS = re.compile(r"out of memory|ALLOC_FAILED|MemoryAllocation|memory allocation", re.IGNORECASE)


class ReferenceLost(Exception):
    """The reference worker died or stopped answering during a request."""


class Float64Lost(RuntimeError):
    """The reference's float64 evaluation ran out of device memory at sizes where it had fit: not the
    problem's size, the device's memory taken (by a candidate's worker, which the evaluator retries
    without and then charges under rule `resource`, tools/evaluate.py). Left as "does not fit", the
    set would be judged by the float32 tolerance alone, where a TF32 product passes (attack50, H1),
    and the answer, cached per seed, would do the same for every later candidate."""


class Reference:
    """The reference worker and what it has computed. Not thread-safe: the evaluator's lock
    guards it."""

    def __init__(self, problem: ProblemInfo, spawn: Callable[[], WorkerProcess],
                 start: Callable[[WorkerProcess], None], build_timeout: float) -> None:
        self.problem = problem
        self._spawn, self._start, self._build_timeout = spawn, start, build_timeout
        self.proc = spawn()  # starts loading now; build() waits for it
        self.restarts = 0
        self.cache: dict[tuple[int, str], Any] = {}
        self.forward_s = 0.0  # the slowest forward pass of its trials so far (a candidate's deadline scales with it)
        # (seed, distribution) -> the reference's outputs evaluated in float64 (tools/worker/float64.py),
        # or why there are none; kept beside `cache`, and for a borrowed set until the next request
        self.wide: dict[tuple[int, str], tuple[Any, str | None]] = {}
        self.init: tuple[dict[str, Any], bytes] = ({"t": "list", "items": []}, b"")  # get_init_inputs(), encoded
        self.variant_inits: dict[int, tuple[dict[str, Any], bytes]] = {}  # the same, per held-out variant
        # the sizes ("problem", "variant:K", "rows") whose float64 evaluation has fit on this device;
        # each tried when the evaluator opens, before any candidate (Bench.decide_float64)
        self.float64_fit: set[str] = set()
        # whether a float64 out-of-memory there is a fault (Float64Lost): once the evaluator has opened.
        # While it opens no candidate runs, and an out-of-memory is the problem's size (recorded as such)
        self.float64_strict = False

    # the worker -----------------------------------------------------------------------
    def build(self) -> None:
        """Wait for the worker, have it load the problem's file (a worker starts before it knows its
        problem: tools/processes/spawner.py), build the problem's Model, and read the problem's description."""
        self._start(self.proc)
        loaded, _ = self.request({"op": "load", "problem": str(self.problem.path), "entry": self.problem.entry},
                                 self._build_timeout)
        if loaded.get("op") != "loaded":
            message = loaded.get("message") or "the reference worker could not load it"
            raise ProblemError(f"{self.problem.path.name}: {message}".splitlines()[0])
        built, payload = self.checked({"op": "build"}, self._build_timeout)
        apply_description(self.problem, built["problem"])
        self.init = (built["init"], payload)  # what a candidate's constructor gets: it never runs the problem file
        self.variant_inits.clear()

    def variant_init(self, index: int, timeout: float) -> tuple[dict[str, Any], bytes]:
        """get_init_inputs() of held-out variant `index`, encoded (asked once, then kept)."""
        if index not in self.variant_inits:
            header, payload = self.checked({"op": "variant_init", "index": index}, timeout)
            self.variant_inits[index] = (header["init"], payload)
        return self.variant_inits[index]

    def ensure_alive(self) -> bool:
        """Restart the worker if it has died since its last request; True if it was restarted.
        Its cached outputs stay: they are a function of the problem and the seed."""
        if self.proc.alive():
            return False
        self.restart()
        return True

    def restart(self) -> None:
        self.proc.close()
        self.proc = self._spawn()
        self.restarts += 1
        try:
            self.build()
        except ReferenceLost as exc:
            raise ProblemError(f"{self.problem.path.name}: the reference worker died again while restarting: {exc}") from None

    def alive(self) -> bool:
        return self.proc.alive()

    def close(self) -> None:
        """Kill the worker and reap it, without asking it to exit first: it is trusted, holds nothing
        to flush, and an interpreter with torch and a CUDA context takes about a second to shut down
        politely (seen on an H100 as 7% of a warm batch slot's time)."""
        self.proc.kill()
        self.cache.clear()
        self.wide.clear()

    # requests ---------------------------------------------------------------------------
    def request(self, msg: dict[str, Any], timeout: float) -> tuple[dict[str, Any], bytes]:
        """A request whose error replies come back as they are (timing, compile baselines).

        A reply that announces new memory has its handle taken here, at once and in order, and
        comes back without the announcement: `outputs` reads the new arena. Left to the callers,
        a reply whose values were not wanted (a float64 evaluation skipped, a header read for its
        samples) left its handle queued, and the next announced arena was mapped from that older,
        smaller allocation: at KernelBench's published size of level 1's 4D tensor-matrix product
        on an H100, the evaluator failed to open ("tensor does not lie within the arena")."""
        try:
            header, payload = self.proc.request(msg, timeout)
            if header.get("arena"):
                self.proc.map_arena(header)
                header = {key: value for key, value in header.items() if key != "arena"}
            return header, payload
        except WorkerGone as exc:  # dead, stuck or out of step: ensure_alive() starts a new one
            self.proc.kill()
            raise ReferenceLost(f"the reference worker ({self.problem.path.name}) is gone: {exc}") from None

    def checked(self, msg: dict[str, Any], timeout: float) -> tuple[dict[str, Any], bytes]:
        """A request whose error reply is the problem's fault: a ProblemError naming the file. A
        float64 evaluation out of device memory at sizes where one has fit raises Float64Lost."""
        header, payload = self.request(msg, timeout)
        if header.get("op") == "error":
            raise ProblemError(f"{self.problem.path.name}: {one_line(header.get('message') or 'the reference failed')}")
        if msg.get("float64") or msg.get("op") == "wide":
            sizes = float64_sizes(msg)
            skipped = header.get("float64_skipped")
            # at sizes where it has run, a float64 evaluation that runs out of memory is the device's state,
            # not the problem's: torch's out-of-memory, or a library's own allocation failing as a plain error
            lost = header.get("float64_oom") or bool(skipped and MEMORY_ERRORS.search(str(skipped)))
            # on the host, whatever fails where it ran at open is the machine's state (memory, time), not the problem
            lost = lost or (sizes == "host" and bool(skipped))
            if lost and self.float64_strict and sizes in self.float64_fit:
                raise Float64Lost(f"the reference's float64 evaluation failed at the {sizes} sizes, where it had "
                                  f"run: {str(skipped)[:200]}")
            if not skipped:
                self.float64_fit.add(sizes)
        return header, payload

    def outputs(self, header: dict[str, Any], payload: bytes) -> Any:
        return self.proc.outputs(header, payload)

    def outputs_for(self, seed: int, dist: str, *, timeout: float, arena_cap: int, size: int, keep_bytes: int,
                    borrow: bool = False, float64: bool = False) -> Any:
        """[outputs, inputs] of the reference on the inputs of (seed, distribution), `size` bytes,
        computed once and kept (oldest dropped first) while they fit in `keep_bytes`. A set larger than
        `keep_bytes` is not kept: held by the parent after its trial, a 12 GiB set (a 6 GiB input
        and output) left no room for the timing on an 80 GiB GPU. With `borrow`, such a set is
        not even copied: the values are views into the reference worker's arena, valid until its
        next request (the caller holds the evaluator's lock until it is done with them). With
        `float64`, the same request has the reference evaluated in float64 too: `wide_for()`."""
        key = (seed, dist)
        if key in self.cache and (not float64 or key in self.wide):
            return self.cache[key]
        while self.cache and size * (len(self.cache) + 1) > keep_bytes:
            oldest = next(iter(self.cache))
            del self.cache[oldest]
            self.wide.pop(oldest, None)
        self.wide = {k: v for k, v in self.wide.items() if k in self.cache}  # a borrowed set's: gone with the arena
        header, payload = self.checked({"op": "trial", "seed": seed, "distribution": dist, "poison": False,
                                        "record": False, "arena_cap": arena_cap, "float64": float64}, timeout)
        value = self.outputs(header, payload)
        seconds = header.get("seconds")
        if isinstance(seconds, (int, float)) and math.isfinite(seconds):
            self.forward_s = max(self.forward_s, float(seconds))
        if float64:
            if not isinstance(value, list) or len(value) != 3:
                raise ReferenceLost("the reference worker's float64 trial reply is not [outputs, inputs, outputs64]")
            why = header.get("float64_skipped")
            self.wide[key] = (None, str(why)) if why or value[2] is None else (value[2], None)
            value = value[:2]
        if size > keep_bytes and borrow:
            return value
        value = clone_tree(value)  # out of the arena: it is reused
        if float64 and self.wide[key][0] is not None:
            self.wide[key] = (clone_tree(self.wide[key][0]), None)
        if size <= keep_bytes:
            self.cache[key] = value
        else:
            self.wide.pop(key, None)
        return value

    def wide_for(self, seed: int, dist: str) -> tuple[Any, str | None]:
        """(the float64 outputs, None) of the last outputs_for(seed, dist, float64=True), or (None,
        why not); a borrowed set's are views into the worker's arena, as its outputs are."""
        return self.wide.get((seed, dist), (None, "the reference's float64 outputs were not asked for"))


def float64_sizes(msg: dict[str, Any]) -> str:
    """Which sizes a float64 request is at: "rows" (sampled rows of the batch), "host" (the
    problem's, evaluated in host memory), "variant:K" (a held-out variant's), or "problem" (a
    trial's or a timing-pool set's)."""
    if msg.get("rows") is not None:
        return "rows"
    if msg.get("host"):
        return "host"
    dist = str(msg.get("distribution") or "")
    return dist if dist.startswith("variant:") else "problem"


def one_line(message: str) -> str:
    """The error and the problem file's innermost line it came from (which function failed)."""
    lines = [ln.strip() for ln in message.splitlines() if ln.strip()]
    where = [ln for ln in lines[:-1] if ln.startswith("line ")]
    return f"{where[-1].split(':', 1)[0]}: {lines[-1]}" if where else lines[-1]


def clone_tree(tree: Any) -> Any:
    """`tree` with each tensor cloned (out of an arena that the worker's next request reuses)."""
    import torch

    if isinstance(tree, torch.Tensor):
        return tree.clone()
    if isinstance(tree, (list, tuple)):
        return type(tree)(clone_tree(x) for x in tree)
    return tree
