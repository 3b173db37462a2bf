"""What a confined worker may see and run: the file system view and the executables, per profile.

A worker reads only what it needs to run Python, torch, Triton and the toolchain: the system
directories (/usr and its merged-usr links), a few files of /etc, the Python installation and
the directories Python imports from, the evaluator's own package, and, on a GPU, the NVIDIA
device nodes. Nothing else of the host is there: not the user's home, not the workspaces, not
the evaluator's caches. Executables are narrower still (landlock, tools/worker/confine.py):

- "run" (a candidate being tested): the ELF loader, the C compiler driver and its internals and
  binutils (Triton compiles a small launcher with the system C compiler), and Triton's bundled
  ptxas and friends.
- "build" (a load_inline candidate being compiled, with no GPU): "run" plus /bin/sh (ninja runs
  every build step through it), ninja, the C++ driver, nvcc and the CUDA toolkit's tools, and the
  Python interpreter (pip's ninja is a Python script).
"""
from __future__ import annotations

import functools
import os
import shutil
import site
import sys
from pathlib import Path

PROJECT_ROOT = Path(__file__).resolve().parent.parent.parent
SYSTEM_DIRS = ("usr", "bin", "sbin", "lib", "lib32", "lib64", "libx32")
ETC_ENTRIES = ("ld.so.cache", "ld.so.conf", "ld.so.conf.d", "alternatives", "passwd", "group", "nsswitch.conf",
               "localtime")
RUN_TOOLS = ("cc", "gcc", "as", "ld", "ld.bfd", "ld.gold")
BUILD_TOOLS = ("sh", "c++", "g++", "ninja", "nvcc")
LOADERS = ("/lib64/ld-linux-x86-64.so.2", "/lib/ld-linux-aarch64.so.1")
GCC_DIRS = ("/usr/lib/gcc", "/usr/libexec/gcc")


def _existing(paths) -> list[Path]:
    out: list[Path] = []
    for p in paths:
        if p and Path(p).exists() and Path(p) not in out:
            out.append(Path(p))
    return out


def _outermost(paths: list[Path]) -> list[Path]:
    """Drop paths that lie inside another path of the list."""
    kept: list[Path] = []
    for p in sorted(set(paths), key=lambda x: len(x.parts)):
        if not any(p == k or k in p.parents for k in kept):
            kept.append(p)
    return kept


@functools.lru_cache(maxsize=1)
def cuda_home() -> Path | None:
    for name in ("CUDA_HOME", "CUDA_PATH"):
        if os.environ.get(name) and Path(os.environ[name]).is_dir():
            return Path(os.environ[name]).resolve()
    default = Path("/usr/local/cuda")
    if (default / "bin" / "nvcc").exists():
        return default.resolve()
    nvcc = shutil.which("nvcc")
    return Path(nvcc).resolve().parent.parent if nvcc else None


@functools.lru_cache(maxsize=1)
def libcuda_dir() -> Path | None:
    """Where the driver's libcuda.so.1 lives, found as Triton finds it (ldconfig, then
    LD_LIBRARY_PATH): told to Triton through TRITON_LIBCUDA_PATH, so that it need not run
    ldconfig inside the sandbox."""
    import subprocess

    if os.environ.get("TRITON_LIBCUDA_PATH"):
        return Path(os.environ["TRITON_LIBCUDA_PATH"])
    for ldconfig in ("/sbin/ldconfig", "/usr/sbin/ldconfig"):
        if os.path.exists(ldconfig):
            try:
                out = subprocess.run([ldconfig, "-p"], capture_output=True, text=True, timeout=30).stdout
            except (OSError, subprocess.SubprocessError):
                break
            for line in out.splitlines():
                if "libcuda.so.1" in line and "=>" in line:
                    return Path(line.split("=>")[-1].strip()).parent
            break
    for d in os.environ.get("LD_LIBRARY_PATH", "").split(os.pathsep):
        if d and (Path(d) / "libcuda.so.1").exists():
            return Path(d)
    return None


def python_dirs() -> list[Path]:
    """The Python installation and the package directories Python imports from: the prefixes,
    site-packages and dist-packages directories, and PYTHONPATH entries. Never the project root
    (only its `tools` package is shown), a script's or the working directory, /tmp or /."""
    prefixes = [Path(sys.base_prefix), Path(sys.prefix), Path(sys.exec_prefix)]
    dirs = list(prefixes)
    explicit = [e for e in os.environ.get("PYTHONPATH", "").split(os.pathsep) if e]
    for entry in [*sys.path, *explicit]:
        if not entry or not os.path.isabs(entry):
            continue
        p = Path(entry)
        packages = p.name in ("site-packages", "dist-packages") or any(p == x or x in p.parents for x in prefixes)
        if not packages and entry not in explicit:
            continue
        if p.resolve() in (PROJECT_ROOT, Path("/"), Path("/tmp")) or p.resolve() in PROJECT_ROOT.parents:
            continue
        dirs.append(p)
    user_site = site.getusersitepackages() if site.ENABLE_USER_SITE else None
    if user_site and user_site in sys.path:
        dirs.append(Path(user_site))
    real = [d.resolve() for d in _existing(dirs) if d.is_dir()]
    return _outermost([*real, *_existing(dirs)])


@functools.lru_cache(maxsize=1)
def compiler_prefixes() -> list[Path]:
    """Installations of the C/C++ compiler outside /usr that the evaluator's own environment uses
    ($CC, $CXX, or cc/c++ on its PATH; e.g. /opt/gcc): shown and executable in the sandbox."""
    found: list[Path] = []
    for name in (os.environ.get("CC"), os.environ.get("CXX"), "cc", "gcc", "c++", "g++"):
        exe = shutil.which(name) if name else None
        if not exe:
            continue
        real = Path(exe).resolve()
        prefix = real.parent.parent if real.parent.name == "bin" else real.parent
        if not str(real).startswith("/usr/") and prefix != Path("/") and prefix not in found:
            found.append(prefix)
    return found


@functools.lru_cache(maxsize=1)
def launcher_cc() -> Path | None:
    """The system's C compiler (an ELF binary under /usr), for Triton's launchers in a run
    sandbox; None when there is none (then $CC, and the interpreter of a script $CC, are used)."""
    for name in ("cc", "gcc", "clang"):
        exe = shutil.which(name, path="/usr/bin:/bin")
        if exe and not _is_script(Path(exe).resolve()):
            return Path(exe)
    return None


def readable_dirs(extra: list[Path] | None = None) -> list[Path]:
    """Directories bound read-only into the sandbox (besides the system ones and /etc files)."""
    dirs = python_dirs() + [PROJECT_ROOT / "tools"] + compiler_prefixes()
    home = cuda_home()
    if home is not None and not str(home).startswith("/usr/"):
        dirs.append(home)
    for entry in os.environ.get("LD_LIBRARY_PATH", "").split(os.pathsep):
        if entry and os.path.isabs(entry) and os.path.isdir(entry):
            dirs.append(Path(entry))
    lib = libcuda_dir()
    if lib is not None:
        dirs.append(lib)
    dirs += extra or []
    system = [Path("/") / d for d in SYSTEM_DIRS]
    return [d for d in _outermost(_existing(dirs)) if not any(d == s or s in d.parents for s in system)]


def _tool(name: str) -> list[Path]:
    found = shutil.which(name, path=os.pathsep.join(tool_path()))
    if not found:
        return []
    real = Path(found).resolve()
    paths = [real]
    if real.suffix == "" and _is_script(real):  # pip's ninja: a Python script that execs the binary
        paths.append(Path(sys.executable).resolve())
        try:
            import ninja  # type: ignore[import-not-found]

            paths.append(Path(ninja.BIN_DIR).resolve())
        except (ImportError, AttributeError):
            pass
    return paths


def _interpreter(path: Path) -> list[Path]:
    """The interpreter named on a script's #! line (and /usr/bin/env's target), else nothing."""
    try:
        with open(path, "rb") as f:
            line = f.readline(256).decode(errors="replace")
    except OSError:
        return []
    if not line.startswith("#!"):
        return []
    words = line[2:].split()
    if not words:
        return []
    found = [Path(words[0]).resolve()]
    if Path(words[0]).name == "env" and len(words) > 1 and shutil.which(words[1]):
        found.append(Path(shutil.which(words[1]) or words[1]).resolve())
    return found


def _is_script(path: Path) -> bool:
    try:
        with open(path, "rb") as f:
            return f.read(2) == b"#!"
    except OSError:
        return False


def tool_path() -> list[str]:
    """PATH inside the sandbox: the interpreter's bin, the CUDA toolkit's, then the system's."""
    dirs = [str(Path(sys.executable).parent)] + [str(p / "bin") for p in compiler_prefixes()]
    home = cuda_home()
    if home is not None:
        dirs.append(str(home / "bin"))
    dirs += ["/usr/local/bin", "/usr/bin", "/bin"]
    return list(dict.fromkeys(dirs))


def executables(profile: str) -> list[Path]:
    """Files and directories a worker of `profile` ("run" or "build") may execute."""
    paths: list[Path] = [Path(p).resolve() for p in LOADERS if Path(p).exists()]
    paths += _existing(GCC_DIRS) + compiler_prefixes()
    for name in RUN_TOOLS:
        paths += _tool(name)
    cc = os.environ.get("CC")
    if launcher_cc() is None and cc and shutil.which(cc):  # the user's $CC serves the launchers: a script needs its interpreter
        paths += _interpreter(Path(shutil.which(cc) or cc).resolve())
    paths += triton_bins()
    if profile == "build":
        for name in BUILD_TOOLS:
            paths += _tool(name)
        home = cuda_home()
        if home is not None:
            paths += _existing([home / "bin", home / "nvvm" / "bin"])
    return _outermost(_existing(paths))


def triton_bins() -> list[Path]:
    """Triton's bundled ptxas, cuobjdump and nvdisasm (found without importing triton)."""
    import importlib.util

    found: list[Path] = []
    spec = importlib.util.find_spec("triton")
    if spec is not None and spec.origin:
        backends = Path(spec.origin).parent / "backends"
        found += [b.resolve() for b in backends.glob("*/bin") if b.is_dir()]
    for name in ("TRITON_PTXAS_PATH", "TRITON_CUOBJDUMP_PATH", "TRITON_NVDISASM_PATH"):
        if os.environ.get(name) and Path(os.environ[name]).exists():
            found.append(Path(os.environ[name]).resolve())
    return found
