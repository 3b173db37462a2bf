"""CUDA C++ candidates: `load_inline` with a unique name and build directory per source hash, a
lock so two workers never build the same sources at once, and compiler output trimmed to the
first errors with line numbers. The same sources never build twice: the build directory is
keyed by a hash of everything that affects the build, and ninja finds it up to date.
"""
from __future__ import annotations

import fcntl
import hashlib
import json
import re
import time
from pathlib import Path
from typing import Any

MAX_ERRORS = 6
MAX_CHARS = 2000


class BuildError(Exception):
    """nvcc or the host compiler failed; str() is the trimmed compiler output."""


class CudaBuilder:
    """Stands in for torch.utils.cpp_extension.load_inline inside a candidate worker."""

    def __init__(self, root: Path, on_built) -> None:
        from torch.utils import cpp_extension

        # bound before the worker puts this builder in its place: calling the module attribute
        # from load_inline below would call this builder again (and wait on its own lock)
        self._load_inline = cpp_extension.load_inline
        self.root = root
        self.on_built = on_built  # on_built(module, key) -> the module handed to the candidate
        self.seconds = 0.0
        self.cached = 0
        self.built = 0

    def load_inline(self, name: str, cpp_sources: Any, cuda_sources: Any = None, **kwargs: Any):
        kwargs.pop("build_directory", None)
        kwargs.pop("verbose", None)
        key = build_key(cpp_sources, cuda_sources, kwargs)
        directory = self.root / key
        directory.mkdir(parents=True, exist_ok=True)
        unique = f"ratchet_{key}"
        start = time.monotonic()
        with open(directory / ".ratchet.lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            stale = directory / "lock"  # torch's own baton, left behind by a killed build
            if stale.exists():
                stale.unlink()
            fresh = not any(directory.glob("*.so"))
            try:
                module = self._load_inline(
                    unique, cpp_sources, cuda_sources, build_directory=str(directory), verbose=False, **kwargs
                )
            except (RuntimeError, OSError) as exc:
                raise BuildError(trim_compiler_output(str(exc), directory)) from None
        self.seconds += time.monotonic() - start
        if fresh:
            self.built += 1
        else:
            self.cached += 1
        return self.on_built(module, name)


def build_key(cpp_sources: Any, cuda_sources: Any, kwargs: dict[str, Any]) -> str:
    blob = json.dumps([cpp_sources, cuda_sources, sorted((k, repr(v)) for k, v in kwargs.items())], default=repr)
    return hashlib.sha256(blob.encode()).hexdigest()[:20]


def trim_compiler_output(text: str, directory: Path) -> str:
    """The first compiler errors, with file names shortened and line numbers kept."""
    text = text.replace(str(directory) + "/", "")
    lines = text.splitlines()
    error_re = re.compile(r"(error|Error|undefined reference|fatal)")
    picked: list[str] = []
    for i, line in enumerate(lines):
        if error_re.search(line) and not line.startswith(("FAILED:", "ninja: build stopped", "subprocess.")):
            snippet = [line.strip()] + [ln.rstrip() for ln in lines[i + 1 : i + 3] if ln.strip().startswith(("^", " "))]
            picked.append("\n".join(snippet))
            if len(picked) >= MAX_ERRORS:
                break
    out = "\n".join(picked) if picked else "\n".join(lines[-15:])
    return out[:MAX_CHARS]
