"""`python -m tools.worker IN_FD OUT_FD`: a worker process's request loop.

The first frame on IN_FD is the worker's configuration; then one reply on OUT_FD per request,
until "exit" or the parent goes away.
"""
from __future__ import annotations

import os
import sys
from pathlib import Path

from tools.protocol import FrameReader, write_frame
from tools.worker.errors import describe_exception
from tools.worker.worker import Worker


def serve(in_fd: int, out_fd: int) -> None:
    reader = FrameReader(in_fd)
    config, _ = reader.read()
    worker: Worker | None = None
    try:
        worker = Worker(config)
        write_frame(out_fd, {"op": "ready", "pid": os.getpid(), "network": worker.network})
    except BaseException as exc:  # noqa: BLE001 - every failure is reported, none swallowed
        kind, message = describe_exception(exc, Path(config["problem"]).name)
        write_frame(out_fd, {"op": "error", "kind": "problem", "message": message, "cause": kind})
        return
    check_sandbox = worker.sandbox.check  # bound before candidate code loads: patching the class misses it
    while True:
        msg, _ = reader.read()
        op = msg.get("op")
        if op == "exit":
            return
        payload = b""
        try:
            if op == "build":
                reply = worker.build(msg)
            elif op == "trial":
                reply, payload = worker.trial(msg)
            elif op == "time":
                reply, payload = worker.time(msg)
            elif op == "ceilings":
                reply = worker.ceilings()
            elif op == "profile":
                reply = worker.profile(msg)
            else:
                reply = {"op": "error", "kind": "runtime_error", "message": f"unknown request {op!r}"}
        except BaseException as exc:  # noqa: BLE001 - the candidate's failure is the answer
            kind, message = describe_exception(exc, worker.source_name or Path(config["problem"]).name)
            reply, payload = {"op": "error", "kind": kind, "message": message}, b""
        reply["nonce"] = msg.get("nonce")
        reply["violations"] = check_sandbox() if worker.sandbox.armed else []
        write_frame(out_fd, reply, payload)


if __name__ == "__main__":
    serve(int(sys.argv[1]), int(sys.argv[2]))
