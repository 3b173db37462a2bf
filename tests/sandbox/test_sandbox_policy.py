"""The sandbox's policy pieces, without attacking: `--sandbox required` refuses with one line when
a mechanism is missing and `best-effort` runs and says what it lacked; the artifact cache refuses
bad names and sizes and evicts the least recently used; installing kept build products never
rewrites a file in place; load_inline options are allowlisted and flags quoted."""
from __future__ import annotations

import json
import mmap
import os
import subprocess
import sys
from pathlib import Path

import pytest

from helpers_eval import PROBLEMS, CANDIDATES, assert_ok, options, source
from tools.processes.artifacts import ArtifactCache, ArtifactError
from tools.evaluate import Evaluator
from agent.cli.exit_codes import EXIT_SANDBOX
from tools.sandbox import Sandbox, SandboxUnavailable
from tools.sandbox.probe import probe
from tools.worker.candidate import install_files
from tools.worker.cuda_build import BuildError, checked_options, shell_safe

NO_BWRAP = "/nonexistent/bwrap"
CACHE_RULES = frozenset({"import", "file-io", "threads-processes"})  # the guard's filters; the OS is under test


@pytest.fixture
def without_bwrap(monkeypatch):
    monkeypatch.setenv("RATCHET_BWRAP", NO_BWRAP)
    probe.cache_clear()
    yield
    probe.cache_clear()


def test_required_refuses_in_one_line(without_bwrap):
    with pytest.raises(SandboxUnavailable) as caught:
        Sandbox("required")
    message = str(caught.value)
    assert "\n" not in message and "bubblewrap" in message and "--sandbox best-effort" in message


def test_ratchet_eval_exits_with_the_sandbox_code(tmp_path):
    env = {**os.environ, "RATCHET_BWRAP": NO_BWRAP, "RATCHET_CACHE_DIR": str(tmp_path)}
    done = subprocess.run([sys.executable, "-m", "agent.cli", "eval", str(PROBLEMS / "elementwise.py"),
                           str(CANDIDATES / "elementwise_ok.py"), "--device", "cpu", "--no-timing"],
                          capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == EXIT_SANDBOX, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("ratchet eval: the OS sandbox is required but bubblewrap"), done.stderr


def test_a_worker_may_move_files_between_its_own_directories(tmp_path):
    """Triton fills its caches by renaming a file from a temporary directory into place: under
    every landlock layer (the signal scope's included) that must work, or nothing compiles on a
    GPU (it failed there with EXDEV before the scope layer allowed it)."""
    with Evaluator(PROBLEMS / "elementwise.py", options(tmp_path, disabled_rules=CACHE_RULES)) as ev:
        result = ev.evaluate(source("cache_rename_ok"))
    assert_ok(result)


def test_best_effort_runs_and_records_what_was_missing(without_bwrap, tmp_path):
    with Evaluator(PROBLEMS / "elementwise.py", options(tmp_path, sandbox="best-effort")) as ev:
        result = ev.evaluate(source("elementwise_ok"))
    assert_ok(result)
    sandbox = result.environment["sandbox"]
    assert sandbox["mode"] == "best-effort" and "rlimits" in sandbox["mechanisms"]
    assert any("bubblewrap" in m for m in sandbox["missing"]) and "seccomp" not in sandbox["mechanisms"]
    json.dumps(result.to_dict())


# -- the artifact cache -----------------------------------------------------------------------

def manifest(*files: tuple[str, bytes]) -> tuple[list[dict], bytes]:
    entries, blob = [], b""
    for name, data in files:
        entries.append({"path": name, "offset": len(blob), "length": len(data)})
        blob += data
    return entries, blob


@pytest.mark.parametrize("bad", ["../escape", "triton/../../x", "/abs/path", "elsewhere/x", "triton/a b", "triton/" + "d/" * 5 + "x"])
def test_the_cache_refuses_bad_names(tmp_path, bad):
    cache = ArtifactCache(tmp_path)
    with pytest.raises(ArtifactError):
        cache.put("triton-x", *manifest((bad, b"data")))
    assert not cache.published("triton-x") and not list(tmp_path.rglob("data"))


def test_the_cache_refuses_sizes_and_payload_overruns(tmp_path):
    cache = ArtifactCache(tmp_path, namespace_cap_bytes=10)
    with pytest.raises(ArtifactError):
        cache.put("triton-big", *manifest(("triton/k/big", b"x" * 11)))
    with pytest.raises(ArtifactError):
        cache.put("triton-over", [{"path": "triton/k/f", "offset": 0, "length": 5}], b"abc")


def test_a_namespace_is_published_once_and_never_rewritten(tmp_path):
    cache = ArtifactCache(tmp_path)
    assert cache.put("cuda-a", *manifest(("cuda/k/ratchet_k.so", b"first"))) == 1
    assert cache.put("cuda-a", *manifest(("cuda/k/ratchet_k.so", b"second"))) == 0
    entries, blob = cache.get("cuda-a")
    assert [e["path"] for e in entries] == ["cuda/k/ratchet_k.so"] and blob == b"first"


def test_the_least_recently_used_namespaces_go_first(tmp_path):
    cache = ArtifactCache(tmp_path, cap_bytes=25)
    for name in ("triton-a", "triton-b"):
        cache.put(name, *manifest(("triton/k/f", b"x" * 10)))
    os.utime(tmp_path / "triton-a" / ".complete", (1, 1))  # a: used longest ago
    cache.put("triton-c", *manifest(("triton/k/f", b"x" * 10)))
    assert not cache.published("triton-a") and cache.published("triton-b") and cache.published("triton-c")


# -- installing kept products -------------------------------------------------------------------

def test_installing_never_rewrites_a_mapped_file(tmp_path):
    where = {"cuda": tmp_path / "cuda", "triton": tmp_path / "triton"}
    target = where["triton"] / "key" / "__triton_launcher.so"
    target.parent.mkdir(parents=True)
    target.write_bytes(b"loaded" * 1000)
    with open(target, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as mapped:
        install_files(where, *manifest(("triton/key/__triton_launcher.so", b"other" * 1000), ("triton/key/new.cubin", b"c")))
        assert mapped[:6] == b"loaded"  # the mapped file was left alone
    assert (where["triton"] / "key" / "new.cubin").read_bytes() == b"c"


# -- load_inline options ---------------------------------------------------------------------------

def test_flags_are_one_shell_word_each():
    flags = shell_safe(checked_options({"extra_cflags": ["-O3", "-DX=$(id)", "-DY=`id`", "-DZ=a b"]}))["extra_cflags"]
    assert flags == ["-O3", "'-DX=$$(id)'", "'-DY=`id`'", "'-DZ=a b'"]


@pytest.mark.parametrize("options_,fragment", [
    ({"extra_cflags": ["-O3\nrule pwn"]}, "line break"),
    ({"use_pch": True}, "not supported"),
    ({"extra_include_paths": ["/x;touch y"]}, "not a plain path"),
    ({"is_python_module": False}, "is_python_module"),
    ({"extra_ldflags": "-lfoo"}, "list of strings"),
])
def test_options_the_evaluator_does_not_build_are_refused(options_, fragment):
    with pytest.raises(BuildError, match=fragment):
        checked_options(options_)


def test_a_wrapper_runs_inside_the_workers_sandbox_and_never_without_bubblewrap(tmp_path, monkeypatch):
    """get_ncu_profile's Nsight Compute runs as the parent of a candidate's worker (tools/counters/):
    inside the worker's own pid namespace, under its seccomp filter and no_new_privs, as its
    unprivileged uid when the evaluator is root, and under the worker's landlock rules (here: a
    program copied to its TMPDIR may not be executed); and not at all where there is no bubblewrap
    (it would run as the evaluator's own user)."""
    from tools.sandbox import Wrapper

    probe_exec = ('cp /usr/bin/true "$TMPDIR/t" && if "$TMPDIR/t" 2>/dev/null; then echo EXEC-ALLOWED >&2; '
                  'else echo EXEC-REFUSED >&2; fi; exec /usr/bin/timeout 300 "$@"')
    system = [Path(p).resolve() for p in ("/usr/bin", "/bin")]
    with Evaluator(PROBLEMS / "elementwise.py", options(tmp_path)) as ev:
        proc = ev.spawner.spawn("candidate", "run", wrapper=Wrapper(["/bin/sh", "-c", probe_exec, "sh"], [], system))
        try:
            assert proc.wait_ready(120).get("op") == "ready"
            wrapped = [p for p in os.listdir("/proc") if p.isdigit() and _cmdline(p)[:2] == ["/usr/bin/timeout", "300"]
                       and "tools.worker" in _cmdline(p)]
            assert len(wrapped) == 1, wrapped
            pid = wrapped[0]
            assert os.readlink(f"/proc/{pid}/ns/pid") != os.readlink("/proc/self/ns/pid")
            status = dict(line.split(":", 1) for line in open(f"/proc/{pid}/status").read().splitlines() if ":" in line)
            assert status["Seccomp"].strip() == "2" and status["NoNewPrivs"].strip() == "1", status
            if os.geteuid() == 0:
                assert os.stat(f"/proc/{pid}").st_uid != 0
            assert "EXEC-REFUSED" in proc.log.read_text(), proc.log.read_text()[-2000:]
        finally:
            proc.close()
    monkeypatch.setenv("RATCHET_BWRAP", NO_BWRAP)
    probe.cache_clear()
    try:
        with pytest.raises(SandboxUnavailable, match="only inside bubblewrap"):
            Sandbox("best-effort").launch((3, 4, 5), scratch=tmp_path, profile="run", device="cpu", gpu=False,
                                          extra_env={}, wrapper=Wrapper(["/usr/bin/timeout", "300"], [], []))
    finally:
        probe.cache_clear()


def _cmdline(pid: str) -> list[str]:
    try:
        return open(f"/proc/{pid}/cmdline", "rb").read().decode(errors="replace").split("\0")
    except OSError:
        return []
