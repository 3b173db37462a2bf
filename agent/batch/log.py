"""A batch run directory: its file names, the row statuses, and the results file (`RunLog`).

A run directory (`--out`) holds `run.json` (what was run, with which settings), `results.jsonl`
(one row per finished problem) and `logs/<problem>.log` (each problem's agent log); the driver
(agent/batch/driver.py) writes it, `ratchet report DIR` (agent/batch/report.py) reads it.
"""
from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

RESULTS = "results.jsonl"
RUN_META = "run.json"
LOGS = "logs"
# Row statuses. A problem whose latest row has one of FINAL is done; --resume retries the others
# ("stopped", "model_error", "error", "crashed").
# unrecognized, kept_eager: by the built-in policy (kept_eager: no work a kernel of its own could do)
FINAL = frozenset({"finished", "invalid_problem", "unrecognized", "kept_eager"})


class RunLog:
    """The run's JSONL: one row per finished problem. Appends are crash-safe: a row is one
    write of one line, flushed and fsynced before `append` returns; a torn last line (the writer
    died mid-write) is ignored on read and cut off before the next append."""

    def __init__(self, path: Path):
        self.path = Path(path)

    def rows(self) -> list[dict[str, Any]]:
        try:
            data = self.path.read_bytes()
        except FileNotFoundError:
            return []
        rows = []
        for line in data.split(b"\n"):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except ValueError:
                continue  # torn (the last line) or damaged: never a row
            if isinstance(row, dict) and "problem" in row:
                rows.append(row)
        return rows

    def latest(self) -> dict[str, dict[str, Any]]:
        """The latest row of each problem (a retried problem has several)."""
        return {row["problem"]: row for row in self.rows()}

    def repair(self) -> None:
        """Cut a torn last line off, so the next row starts on a line of its own."""
        try:
            data = self.path.read_bytes()
        except FileNotFoundError:
            return
        if data and not data.endswith(b"\n"):
            with open(self.path, "r+b") as f:
                f.truncate(data.rfind(b"\n") + 1)
                f.flush()
                os.fsync(f.fileno())

    def append(self, row: dict[str, Any]) -> None:
        line = (json.dumps(row, sort_keys=True) + "\n").encode()
        fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, line)
            os.fsync(fd)
        finally:
            os.close(fd)
