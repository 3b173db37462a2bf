"""CUDA C++ candidates: `load_inline`, in two steps that run in different sandboxes.

- Build (profile "build": a worker with no GPU that may run /bin/sh, ninja, nvcc and the host
  compiler): torch's load_inline compiles the sources into this worker's private scratch, under
  a unique name per build key (a hash of the sources and options). Options go through an
  allowlist, and every flag is quoted for the shell and escaped for ninja, because ninja runs
  each step through /bin/sh: a flag is a flag, never a command. The worker hands the built
  extension (.so) to the parent, which keeps it for this source only.
- Run (profile "run": the GPU worker, which may not run a shell, ninja or nvcc): the parent
  installs the built .so below the scratch directory, and load_inline with the same arguments
  loads it. Arguments the build step never saw cannot be built here: a compile_error says so.

Compiler output is trimmed to the first errors with line numbers.
"""
from __future__ import annotations

import hashlib
import importlib.machinery
import importlib.util
import json
import re
import shlex
import time
from pathlib import Path
from typing import Any

MAX_ERRORS = 6
MAX_CHARS = 2000
FLAG_OPTIONS = ("extra_cflags", "extra_cuda_cflags", "extra_ldflags")
OPTIONS = frozenset({*FLAG_OPTIONS, "functions", "extra_include_paths", "with_cuda", "with_pytorch_error_handling",
                     "verbose", "keep_intermediates", "build_directory", "is_python_module"})
SAFE_PATH = re.compile(r"^[A-Za-z0-9_./+=-]+$")


class BuildError(Exception):
    """nvcc or the host compiler failed, or load_inline was called in a way the evaluator does
    not build; str() is the message for the model."""


class CudaBuilder:
    """Stands in for torch.utils.cpp_extension.load_inline inside a candidate worker."""

    def __init__(self, root: Path, on_built, build: bool) -> None:
        from torch.utils import cpp_extension

        # bound before the worker puts this builder in its place: calling the module attribute
        # from load_inline below would call this builder again
        self._load_inline = cpp_extension.load_inline
        self.root = root  # <scratch>/cuda: one directory per build key
        self.build = build
        self.on_built = on_built  # on_built(module, name) -> the module handed to the candidate
        self.seconds = 0.0
        self.cached = 0
        self.built = 0
        self.artifacts: list[Path] = []  # the extensions this worker built

    def load_inline(self, name: str, cpp_sources: Any, cuda_sources: Any = None, **kwargs: Any):
        options = checked_options(kwargs)
        key = build_key(cpp_sources, cuda_sources, options)
        unique = f"ratchet_{key}"
        directory = self.root / key
        library = directory / f"{unique}.so"
        start = time.monotonic()
        if library.exists():
            module = _load_library(unique, library)
            self.cached += 1
        elif not self.build:
            raise BuildError(f"load_inline({name!r}, ...) was called with sources or options that the build step did not "
                             "see: build them at module level with arguments that do not depend on the GPU (the build "
                             "step runs without one)")
        else:
            directory.mkdir(parents=True, exist_ok=True)
            try:
                module = self._load_inline(unique, cpp_sources, cuda_sources, build_directory=str(directory),
                                           verbose=False, **shell_safe(options))
            except (RuntimeError, OSError) as exc:
                raise BuildError(trim_compiler_output(str(exc), directory)) from None
            self.built += 1
            self.artifacts.append(library)
        self.seconds += time.monotonic() - start
        return self.on_built(module, name)


def checked_options(kwargs: dict[str, Any]) -> dict[str, Any]:
    unknown = sorted(set(kwargs) - OPTIONS)
    if unknown:
        raise BuildError(f"load_inline option(s) {', '.join(unknown)} are not supported by the evaluator "
                         f"(supported: {', '.join(sorted(OPTIONS))})")
    if kwargs.get("is_python_module") is False:
        raise BuildError("load_inline(is_python_module=False) is not supported: build a Python module")
    options = {k: v for k, v in kwargs.items() if k not in ("verbose", "keep_intermediates", "build_directory")}
    for option in FLAG_OPTIONS:
        flags = options.get(option)
        if flags is None:
            continue
        if isinstance(flags, str) or not all(isinstance(f, str) for f in flags):
            raise BuildError(f"load_inline {option} must be a list of strings")
        for flag in flags:
            if any(c in flag for c in "\n\r\0"):
                raise BuildError(f"load_inline {option}: {flag!r} holds a line break or NUL, which no flag needs")
    for path in options.get("extra_include_paths") or []:
        if not isinstance(path, str) or not SAFE_PATH.match(path):
            raise BuildError(f"load_inline extra_include_paths: {path!r} is not a plain path")
    return options


def shell_safe(options: dict[str, Any]) -> dict[str, Any]:
    """Each flag as one shell word, with ninja's `$` escaped: ninja writes flags into a command
    line that /bin/sh runs."""
    out = dict(options)
    for option in FLAG_OPTIONS:
        if out.get(option) is not None:
            out[option] = [shlex.quote(f).replace("$", "$$") for f in out[option]]
    return out


def build_key(cpp_sources: Any, cuda_sources: Any, options: dict[str, Any]) -> str:
    import torch

    toolchain = [torch.__version__, torch.version.cuda, __import__("os").environ.get("TORCH_CUDA_ARCH_LIST", "")]
    blob = json.dumps([cpp_sources, cuda_sources, sorted((k, repr(v)) for k, v in options.items()), toolchain],
                      default=repr)
    return hashlib.sha256(blob.encode()).hexdigest()[:20]


def _load_library(name: str, path: Path):
    loader = importlib.machinery.ExtensionFileLoader(name, str(path))
    spec = importlib.util.spec_from_file_location(name, str(path), loader=loader)
    if spec is None:
        raise BuildError(f"cannot load the built extension {path.name}")
    module = importlib.util.module_from_spec(spec)
    loader.exec_module(module)
    return module


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
