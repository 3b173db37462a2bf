"""The environment of a confined worker: built from an allowlist, never copied from the parent.

The evaluator's own environment holds the user's secrets (API keys, tokens); a candidate sees
none of it. Variables the toolchain needs are set explicitly; a few the user's setup may need
(CUDA device selection, library paths, the compiler choice) pass through; RATCHET_SANDBOX_ENV
names more (comma-separated), except any that looks like a credential.
"""
from __future__ import annotations

import os
from pathlib import Path

from tools.sandbox import paths

PASS_THROUGH = ("CUDA_VISIBLE_DEVICES", "CUDA_DEVICE_ORDER", "LD_LIBRARY_PATH", "TRITON_PTXAS_PATH",
                "TRITON_CUOBJDUMP_PATH", "TRITON_NVDISASM_PATH", "NVIDIA_TF32_OVERRIDE", "PYTORCH_CUDA_ALLOC_CONF")
# torch's caching allocator in every worker (the user's PYTORCH_CUDA_ALLOC_CONF replaces it in
# both): a cached block over 256 MB is never split for a smaller request. Measured on an H100
# with 8 GiB outputs (docs/evaluator.md): the timer's 100 MB buffer, made after a trial's output
# had been freed, was cut out of that output's 8 GiB block, and the next 8 GiB output found no
# block whole and no room left on the card.
ALLOCATOR_CONF = "max_split_size_mb:256"
BUILD_PASS_THROUGH = ("CC", "CXX", "CUDAHOSTCXX", "NVCC_CCBIN", "NVCC_PREPEND_FLAGS", "NVCC_APPEND_FLAGS")
SECRET_WORDS = ("KEY", "TOKEN", "SECRET", "PASSWORD", "CREDENTIAL", "AUTH", "COOKIE", "SESSION")


def secret(name: str) -> bool:
    """Whether a variable looks like a credential (kept out of every worker)."""
    upper = name.upper()
    return upper.startswith("OPENAI_") or any(w in upper for w in SECRET_WORDS)


def candidate_env(device: str, scratch: Path, profile: str, extra: dict[str, str]) -> dict[str, str]:
    """The environment of a confined worker of `profile` ("run" or "build"). A build uses the
    user's compilers ($CC, $CXX, $CUDAHOSTCXX: torch's C++ ABI); a run needs a C compiler only for
    Triton's launchers, and gets the system's (paths.launcher_cc) when there is one."""
    env = {
        "PATH": os.pathsep.join(paths.tool_path()),
        "HOME": str(scratch),
        "TMPDIR": str(scratch / "tmp"),
        "USER": "ratchet", "LOGNAME": "ratchet",
        "LANG": "C.UTF-8",
        "PYTHONPATH": os.pathsep.join([str(paths.PROJECT_ROOT), *_python_path()]),
        "PYTHONDONTWRITEBYTECODE": "1",
        "PYTHONWARNINGS": "ignore",
        "CUBLAS_WORKSPACE_CONFIG": ":4096:8",
        "PYTORCH_CUDA_ALLOC_CONF": ALLOCATOR_CONF,
        "TORCH_EXTENSIONS_DIR": str(scratch / "torch_extensions"),
        "TRITON_HOME": str(scratch),
    }
    home = paths.cuda_home()
    if home is not None:
        env["CUDA_HOME"] = str(home)
    lib = paths.libcuda_dir()
    if lib is not None:
        env["TRITON_LIBCUDA_PATH"] = str(lib)
    if device == "cpu":
        env["TRITON_INTERPRET"] = "1"
    if profile == "run" and paths.launcher_cc() is not None:
        env["CC"] = str(paths.launcher_cc())
    wanted = list(PASS_THROUGH) + (list(BUILD_PASS_THROUGH) if profile == "build" else ["CC"] if "CC" not in env else [])
    wanted += [n.strip() for n in os.environ.get("RATCHET_SANDBOX_ENV", "").split(",") if n.strip()]
    for name in wanted:
        if name in os.environ and not secret(name):
            env[name] = os.environ[name]
    env.update(extra)
    return env


def _python_path() -> list[str]:
    return [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep)
            if p and os.path.isabs(p) and Path(p).resolve() != paths.PROJECT_ROOT]
