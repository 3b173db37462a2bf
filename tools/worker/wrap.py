"""`python -m tools.worker.wrap SPEC PROGRAM [ARGS...]`: start a trusted program (Nsight Compute,
tools/counters/) as the parent of a candidate's worker, confined like the worker first.

Run inside the worker's bubblewrap sandbox, before any candidate code exists. The program is the
worker's parent and talks to an injection library that lives in the candidate's process, so a
candidate may try to take it over: it must hold no more than the candidate does. This applies
SPEC (the worker's own resource limits and landlock rules, with the program's installation
added to what may be executed, tools/sandbox/__init__.py `Sandbox.launch`) to itself, makes its
TMPDIR (the worker's, below the scratch directory: it exists only once the worker runs), and
execs the program, which starts the worker; the worker confines itself again.
"""
from __future__ import annotations

import json
import os
import sys

from tools.worker import confine


def main(argv: list[str]) -> None:
    if len(argv) < 3:
        raise SystemExit("usage: python -m tools.worker.wrap SPEC PROGRAM [ARGS...]")
    spec = json.loads(argv[1])
    tmp = os.environ.get("TMPDIR")
    if tmp:
        os.makedirs(tmp, exist_ok=True)
    confine.apply(spec)
    os.execv(argv[2], argv[2:])


if __name__ == "__main__":
    main(sys.argv)
