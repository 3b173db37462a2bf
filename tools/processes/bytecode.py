"""A bytecode cache for the evaluator's workers, where the Python installation has none (parent side).

Python compiles a module from source each time it is imported unless a `.pyc` of it sits in the
`__pycache__` beside it. Installers that skip bytecode (uv by default, `pip --no-compile`) into a
directory the user cannot write (a container's virtual environment owned by root) leave torch with
none, and every process compiles it again: on an H100 machine whose torch 2.11 had no bytecode,
importing torch and torch._dynamo took 11 s, inside a worker or not, so each candidate worker
took 12-15 s to start. Workers never write bytecode beside the sources (PYTHONDONTWRITEBYTECODE).

So, when torch has no bytecode beside it (or EvalOptions.bytecode_cache is "on"), every worker of a spawner
gets PYTHONPYCACHEPREFIX pointing at `<cache dir>-bytecode`, a directory of the evaluator's own,
beside its cache directory (candidates may not read that one):

- the reference worker (the user's own code, unconfined) writes there as it imports;
- a candidate's worker reads from there (bound read-only under bwrap) and writes nothing: its
  environment says PYTHONDONTWRITEBYTECODE, and bwrap and landlock refuse its writes outside its
  scratch directory.

Only where a candidate cannot change it: under bwrap, or with landlock and a uid of the worker's
own (landlock refuses writes but not chmod or chown, which a candidate of the files' own uid could
use to open the directory to anyone). Otherwise a candidate could plant bytecode that the next
reference worker would run, so there is no cache. The problem's and the candidate's own files are
never compiled into it (tools/worker/errors.py, load_module): the next problems' candidates would
read them.

EvalOptions.bytecode_cache: "auto" (the default, as above), "on" (whatever torch has), "off".
"""
from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

MODES = ("auto", "on", "off")


def torch_has_bytecode() -> bool:
    """Whether torch's package has its `.pyc` beside its sources (found without importing torch)."""
    spec = importlib.util.find_spec("torch")
    if spec is None or not spec.origin:
        return True  # no torch to speed up
    init = Path(spec.origin)
    return (init.parent / "__pycache__" / f"{init.stem}.{sys.implementation.cache_tag}.pyc").is_file()


def prefix_for(cache_dir: Path, mode: str, *, protected: bool) -> Path | None:
    """The workers' PYTHONPYCACHEPREFIX, made if need be, or None for none (module docstring).
    `protected`: a candidate's worker cannot change it (Sandbox.read_only_for_candidates)."""
    if mode not in MODES:
        raise ValueError(f"bytecode_cache={mode!r}: expected one of {', '.join(MODES)}")
    if mode == "off" or not protected or (mode == "auto" and torch_has_bytecode()):
        return None
    prefix = cache_dir.parent / f"{cache_dir.name}-bytecode"
    try:
        prefix.mkdir(parents=True, exist_ok=True)
        prefix.chmod(0o755)  # a worker running as its own uid reads it
    except OSError:  # e.g. a cache directory whose parent only root may write: workers compile, as without it
        return None
    return prefix


def worker_env(prefix: Path | None, *, writer: bool) -> dict[str, str]:
    """The variables a worker gets for the cache: the reference worker (`writer`) writes to it,
    a candidate's only reads (its PYTHONDONTWRITEBYTECODE stays)."""
    if prefix is None:
        return {}
    env = {"PYTHONPYCACHEPREFIX": str(prefix)}
    if writer:
        env["PYTHONDONTWRITEBYTECODE"] = ""  # empty: Python writes bytecode
    return env
