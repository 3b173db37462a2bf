"""`python -m tools.worker IN_FD OUT_FD`: a worker process's request loop.

The first frame on IN_FD is the worker's configuration (its payload: files to put below the
scratch directory before anything runs). The worker confines itself as the configuration says
(tools/worker/confine.py) before it imports torch, then answers one frame per request on OUT_FD
until "exit" or the parent goes away. Every reply carries the request's nonce and the
violations the Python-level hooks saw.
"""
from __future__ import annotations

import os
import socket
import sys
import time
from pathlib import Path
from typing import Any

from tools.wire.protocol import FrameReader, write_frame


def serve(in_fd: int, out_fd: int, memory_fd: int) -> None:
    boot = {"main": time.monotonic()}  # start-up steps, on the clock the parent spawned it by
    reader = FrameReader(in_fd)
    config, files = reader.read()
    config["memory_fd"] = memory_fd
    config["boot"] = boot
    memory = socket.socket(fileno=memory_fd)  # device memory handles go to the parent over it
    try:
        from tools.worker import confine

        scratch = Path(config["scratch"])
        (scratch / "tmp").mkdir(parents=True, exist_ok=True)
        applied = confine.apply(config.get("confine"))  # before torch: one thread, no candidate yet
        boot["confined"] = time.monotonic()
        if files:  # the evaluator's own compiled kernels (tools/processes/builds.py: the tools layer), before prewarm
            from tools.worker.candidate import install_files, roots

            install_files(roots(config), config["files"], files)
        worker = _make(config)
    except BaseException as exc:  # noqa: BLE001 - every failure is reported, none swallowed
        from tools.worker.errors import describe_exception

        kind, message = describe_exception(exc, Path(config.get("problem") or "worker").name)
        write_frame(out_fd, {"op": "error", "kind": "problem", "message": message, "cause": kind})
        return
    boot["ready"] = time.monotonic()
    write_frame(out_fd, {"op": "ready", "confined": applied, "boot": boot})
    handlers = worker.handlers()
    violations = worker.violations  # bound before candidate code loads: patching the class misses it
    while True:
        msg, payload = reader.read()
        op = msg.get("op")
        if op == "exit":
            return
        reply, data = _answer(worker, handlers, op, msg, payload)
        reply["nonce"] = msg.get("nonce")
        reply["violations"] = violations()
        for fd in worker.outgoing:  # before the reply: the parent reads the handle once the reply says so
            socket.send_fds(memory, [b"m"], [fd])
            os.close(fd)
        worker.outgoing.clear()
        write_frame(out_fd, reply, data)


def _make(config: dict[str, Any]):
    if config["role"] == "reference":
        from tools.worker.reference import ReferenceWorker

        return ReferenceWorker(config)
    from tools.worker.candidate import CandidateWorker

    return CandidateWorker(config)


def _answer(worker, handlers, op, msg, payload) -> tuple[dict[str, Any], bytes]:
    from tools.worker.errors import describe_exception

    handler = handlers.get(op)
    if handler is None:
        return {"op": "error", "kind": "runtime_error", "message": f"unknown request {op!r}"}, b""
    try:
        return handler(msg, payload)
    except BaseException as exc:  # noqa: BLE001 - the candidate's failure is the answer
        kind, message = describe_exception(exc, worker.source_name or Path(worker.config.get("problem") or "").name)
        return {"op": "error", "kind": kind, "message": message}, b""


if __name__ == "__main__":
    serve(int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]))
