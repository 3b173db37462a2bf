"""The worker's failures: the Failure it raises, module loading, and exceptions as verdicts.

A worker reports what went wrong as (verdict kind, message for the model). Failure carries a
kind of its own; describe_exception turns any other exception (a CUDA or Triton build error, a
syntax error, a crash inside the candidate's frames) into one. load_module loads the problem's
or the candidate's source file, raising Failure when it cannot be loaded at all.
"""
from __future__ import annotations

import errno
import importlib.util
import resource
import sys
import traceback
from pathlib import Path


class Failure(Exception):
    """A reportable failure of the model under test: kind is a verdict name."""

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind = kind


def load_module(path: Path, name: str):
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise Failure("compile_error", f"cannot load {path.name}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    # no bytecode of the problem's or a candidate's own file in the workers' shared cache
    # (tools/processes/bytecode.py), where later candidates, of other problems too, could read it
    previous, sys.dont_write_bytecode = sys.dont_write_bytecode, True
    try:
        spec.loader.exec_module(module)
    finally:
        sys.dont_write_bytecode = previous
    return module


def autotune_note(exc: BaseException) -> str:
    """' (in @triton.autotune, config ...)' when the exception went through triton's autotuner: the
    candidate's frames alone show the launch line, not that the autotuner was trying a config."""
    seen, config = False, None
    tb = exc.__traceback__
    while tb is not None:
        if Path(tb.tb_frame.f_code.co_filename).parts[-2:] == ("runtime", "autotuner.py"):
            seen = True
            config = tb.tb_frame.f_locals.get("config", config)
        tb = tb.tb_next
    if not seen:
        return ""
    return f" (in @triton.autotune, config {config})" if config is not None else " (in @triton.autotune)"


def describe_exception(exc: BaseException, source_name: str | None) -> tuple[str, str]:
    """(verdict kind, message for the model): the exception and the candidate's own frames."""
    kind, message = _describe(exc, source_name)
    return kind, message + autotune_note(exc)


def _describe(exc: BaseException, source_name: str | None) -> tuple[str, str]:
    import torch

    from tools.worker.cuda_build import BuildError

    name = type(exc).__name__
    if isinstance(exc, Failure):
        return exc.kind, str(exc)
    if isinstance(exc, BuildError):
        return "compile_error", f"CUDA build failed:\n{exc}"
    if isinstance(exc, SyntaxError):
        return "compile_error", f"SyntaxError at line {exc.lineno}: {exc.msg}"
    if name in ("CompilationError", "CompileTimeAssertionFailure") or type(exc).__module__.startswith("triton.compiler"):
        return "compile_error", f"Triton compilation failed: {str(exc)[-1500:]}"
    cause = exc.__cause__
    if name == "InterpreterError" and cause is not None and not isinstance(cause, AssertionError):
        # TRITON_INTERPRET=1 runs a kernel's body as Python: what fails there (shapes, types, a
        # non-power-of-two arange) is what the compiler rejects on a GPU; a device_assert is not
        own = [f for f in traceback.extract_tb(cause.__traceback__) if source_name and Path(f.filename).name == source_name]
        where = "".join(f"  line {f.lineno}, in {f.name}: {f.line}\n" for f in own[-3:])
        return "compile_error", f"Triton compilation failed:\n{where}{type(cause).__name__}: {str(cause)[:1500]}"
    if isinstance(exc, SystemExit):
        return "crashed", f"the candidate called sys.exit({exc.code!r})"
    if isinstance(exc, torch.OutOfMemoryError):
        return "runtime_error", f"out of GPU memory: {str(exc).splitlines()[0]}"
    if isinstance(exc, MemoryError):
        return "runtime_error", "out of host memory (MemoryError)"
    frames = traceback.extract_tb(exc.__traceback__)
    own = [f for f in frames if source_name and Path(f.filename).name == source_name]
    where = "".join(f"  line {f.lineno}, in {f.name}: {f.line}\n" for f in own[-3:])
    kind = "compile_error" if isinstance(exc, (ImportError, NameError)) and not own else "runtime_error"
    if isinstance(exc, OSError) and exc.errno == errno.EFBIG:
        cap = resource.getrlimit(resource.RLIMIT_FSIZE)[0]
        if cap != resource.RLIM_INFINITY:
            return kind, f"{where}{name}: {exc} (every file a worker writes, its printed output included, is capped at {cap >> 20} MiB)"
    return kind, f"{where}{name}: {str(exc)[:1500]}".strip()

