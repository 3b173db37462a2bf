"""Attacks on the evaluator from inside a candidate's process, with native code (a C++ extension
built by load_inline, on the CPU) and with Python that switched the in-process hooks off. The
static guard's rules against them are switched off here: what must hold is the operating
system's confinement (tools/sandbox/). Each test asserts the verdict, and that nothing escaped
(tests/helpers_escape.py): no file outside the sandbox, no surviving process, the shared caches
unchanged.
"""
from __future__ import annotations

import os
import socket
from pathlib import Path

import pytest

from helpers_escape import PROJECT, cache_changes, cache_state, files_named, marker, wait_for_no_survivors
from helpers_eval import PROBLEMS, describe, failed, options, source
from tools import Verdict
from tools.evaluate import Evaluator
from tools.sandbox import UID_BASE, paths

NATIVE_RULES = frozenset({"threads-processes", "network", "file-io"})  # the guard's C++ token list would stop these first


@pytest.fixture(scope="module")
def cache_dir(tmp_path_factory):
    return tmp_path_factory.mktemp("ratchet-cache")


@pytest.fixture
def attack(tmp_path, cache_dir):
    """attack(what, arg, candidate=..., rules=..., **options) -> Result, then the escape checks."""
    token = marker()
    before = cache_state(cache_dir)

    def run(what: str, arg: str = "", candidate: str = "native_attacks", rules=NATIVE_RULES, **overrides):
        problem = tmp_path / "attack_target.py"
        text = (PROBLEMS / "attack_target.py").read_text()
        problem.write_text(text.replace('return ["none", ""]', f"return [{what!r}, {arg!r}]"))
        # the first attack builds the native extension (torch headers, 2 CPU cores in CI): give the
        # build the time a loaded machine needs; no verdict depends on it
        overrides = {"build_timeout": 300.0, **overrides}
        with Evaluator(problem, options(cache_dir, disabled_rules=rules, trials=1, **overrides)) as ev:
            result = ev.evaluate(source(candidate))
            run.evaluator_alive_after = ev.reference.alive()
        return result

    run.token = token
    yield run
    assert not files_named(token, [(Path("/tmp"), 2), (Path.home(), 2), (PROJECT, -1), (cache_dir, -1)]), "a file escaped the sandbox"
    assert not wait_for_no_survivors(token), "a process outlived the evaluation"
    assert not cache_changes(before, cache_state(cache_dir)), "the shared cache changed"


def report(result) -> str:
    assert "attack report: " in result.message, describe(result)
    return result.message.rsplit("attack report: ", 1)[1].strip()


def test_secrets_are_out_of_reach(attack, monkeypatch):
    """The evaluator's environment holds an API key; the candidate reads every environment and
    command line it can see in /proc (its own included): none holds it."""
    secret = f"sk-{attack.token}"
    monkeypatch.setenv("OPENAI_API_KEY", secret)
    monkeypatch.setenv("RATCHET_TEST_TOKEN", secret)
    result = attack("secrets", secret)
    assert result.verdict is Verdict.RUNTIME_ERROR, describe(result)
    assert report(result).startswith("ok:secret found in none among"), describe(result)
    assert secret not in result.message


@pytest.mark.parametrize("where", ["tmp", "home", "project", "cache"])
def test_writes_land_nowhere_outside_the_sandbox(attack, cache_dir, where):
    """/tmp is the sandbox's own (the write succeeds there and vanishes with it); the user's home
    and the caches are not there at all; the evaluator's code is read-only."""
    target = {"tmp": Path("/tmp"), "home": Path.home(), "project": PROJECT / "tools", "cache": cache_dir}[where]
    result = attack("write", str(target / attack.token))
    assert result.verdict is Verdict.RUNTIME_ERROR, describe(result)
    seen = report(result)
    if where == "tmp":
        assert seen.startswith("ok:wrote"), seen  # into its private tmpfs
    else:
        assert seen.startswith("err:open:"), seen


@pytest.mark.parametrize("how", ["link", "rename"])
def test_a_file_outside_cannot_be_linked_or_moved_in(attack, monkeypatch, how):
    """The worker may move files between its own directories (landlock's REFER right, which
    Triton's caches need): that right must not reach a file outside them. Landlock alone is under
    test: no bubblewrap (best-effort), and a file every uid may write, in a directory every uid may
    change, so that only landlock can refuse the hard link (a write through it would change the
    file outside) or the move."""
    import tempfile

    from tools.sandbox.probe import probe

    monkeypatch.setenv("RATCHET_BWRAP", "/nonexistent/bwrap")
    probe.cache_clear()
    folder = Path(tempfile.mkdtemp(prefix="ratchet-victim-", dir="/tmp"))
    try:
        folder.chmod(0o777)
        victim = folder / "victim.txt"
        victim.write_text("original")
        victim.chmod(0o666)
        result = attack(how, str(victim), sandbox="best-effort")
        assert result.verdict is Verdict.RUNTIME_ERROR, describe(result)
        assert report(result).startswith(f"err:{how}:"), describe(result)
        assert any(m.startswith("landlock") for m in result.environment["sandbox"]["mechanisms"])
        assert victim.read_text() == "original" and victim.stat().st_nlink == 1
    finally:
        probe.cache_clear()
        for child in folder.iterdir():
            child.unlink()
        folder.rmdir()


@pytest.mark.parametrize("sandbox", ["required", "best-effort"])
def test_the_workers_bytecode_cache_cannot_be_written(attack, cache_dir, monkeypatch, sandbox):
    """Where torch has no bytecode, the reference worker (trusted, unconfined) writes its .pyc
    files into a directory beside the cache, and candidates read them (tools/processes/bytecode.py). A
    candidate that plants a file there, from native code, is refused: under bwrap the directory
    is a read-only bind, and with landlock alone (best-effort, no bwrap) landlock refuses it."""
    from tools.sandbox.probe import probe

    if sandbox == "best-effort":
        monkeypatch.setenv("RATCHET_BWRAP", "/nonexistent/bwrap")
        probe.cache_clear()
    prefix = cache_dir.parent / f"{cache_dir.name}-bytecode"
    before = _metadata(prefix)
    try:
        result = attack("write", str(prefix / attack.token), bytecode_cache="on", sandbox=sandbox)
        mechanisms = probe()
    finally:
        probe.cache_clear()
    assert result.verdict is Verdict.RUNTIME_ERROR, describe(result)
    assert report(result).startswith("err:open:"), describe(result)
    assert not files_named(attack.token, [(prefix, -1)])
    after = _metadata(prefix)
    assert {p: v for p, v in after.items() if p in before} == before  # nothing it had was changed
    assert {uid for _, uid, _ in after.values()} == {os.getuid()}  # nothing of a candidate's uid
    cached = sandbox == "required" or (mechanisms.root and mechanisms.drop_uid)
    assert not any(prefix.rglob("attack_target*"))  # the problem's own bytecode is never cached
    if cached:
        assert any(prefix.rglob("__init__.*.pyc"))  # the reference worker's, which the candidate read


def _metadata(root: Path) -> dict[Path, tuple[int, int, float]]:
    """Mode, owner and mtime of everything below `root`."""
    return {p: (st.st_mode, st.st_uid, st.st_mtime) for p in root.rglob("*") for st in [p.stat()]}


@pytest.mark.parametrize("sandbox", ["required", "best-effort"])
def test_no_device_node_is_made(attack, monkeypatch, sandbox):
    """A worker left root (best-effort without a uid of its own: landlock alone) could make a node
    of the host's disk in its scratch and write through it: landlock allows no device node."""
    from tools.sandbox.probe import probe

    if sandbox == "best-effort":
        monkeypatch.setenv("RATCHET_BWRAP", "/nonexistent/bwrap")
        probe.cache_clear()
    try:
        result = attack("mknod", sandbox=sandbox)
    finally:
        probe.cache_clear()
    assert result.verdict is Verdict.RUNTIME_ERROR, describe(result)
    assert report(result).startswith("err:mknod:"), describe(result)


def test_no_shell_in_the_run_sandbox(attack):
    result = attack("exec", "/bin/sh")
    assert result.verdict is Verdict.RUNTIME_ERROR, describe(result)
    assert report(result) == "ok:exec exit status 113", describe(result)  # 100 + EACCES: landlock


def test_a_daemon_dies_with_the_evaluation(attack):
    """A grandchild in a session of its own, named after the marker: gone when the evaluation
    ends (the pid namespace dies whole); the candidate itself is honest otherwise."""
    result = attack("daemon", attack.token[:15])
    assert result.verdict is Verdict.OK, describe(result)


def test_signals_reach_only_the_sandbox(attack):
    """kill(-1, SIGKILL) signals every process the caller may: in its pid namespace there is none
    but its own init (which kill(-1) spares)."""
    result = attack("killall")
    assert result.verdict is Verdict.RUNTIME_ERROR, describe(result)
    assert report(result) == "err:kill:No such process", describe(result)
    assert attack.evaluator_alive_after  # the reference worker, outside the sandbox, was not touched


@pytest.mark.parametrize("what", ["ptrace", "vmread"])
def test_reading_another_process_is_killed_from_outside(attack, what):
    """ptrace and process_vm_readv kill the process (seccomp): a fact the parent sees whatever
    the candidate hides in its process."""
    result = attack(what)
    assert result.verdict is Verdict.REJECTED, describe(result)
    assert "system-call filter" in result.message and "worker" in failed(result), describe(result)


def test_no_network(attack):
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen(1)
        server.setblocking(False)
        result = attack("connect", str(server.getsockname()[1]))
        with pytest.raises(BlockingIOError):
            server.accept()  # nobody connected
    assert result.verdict is Verdict.RUNTIME_ERROR, describe(result)
    assert report(result).startswith("err:socket:"), describe(result)


def test_a_fork_bomb_is_bounded(attack):
    result = attack("forkbomb", max_processes=128)
    assert result.verdict in (Verdict.RUNTIME_ERROR, Verdict.CRASHED, Verdict.TIMEOUT), describe(result)
    if result.verdict is Verdict.RUNTIME_ERROR:
        forked = int(report(result).rsplit(" ", 1)[1])
        assert forked < 128, describe(result)


def test_the_scratch_disk_is_capped(attack):
    result = attack("fill", f"/tmp/{attack.token}-fill", scratch_mb=16)
    assert result.verdict is Verdict.RUNTIME_ERROR, describe(result)
    seen = report(result)
    assert "No space left on device" in seen and int(seen.split(" after ")[1].split()[0]) <= 16, seen


def test_build_flags_are_never_shell_code(attack):
    """-DRATCHET_MARK=$(echo 42) and a backtick flag reach the compiler as they are: ninja runs
    every build step through /bin/sh, and an unquoted flag would have run `echo`."""
    result = attack("mark")
    assert report(result) == "ok:mark=$(echo 42) tick=`echo 7`", describe(result)


@pytest.mark.skipif(os.geteuid() != 0, reason="a root evaluator's workers drop to an unprivileged uid")
def test_a_root_evaluator_runs_candidates_unprivileged(attack):
    seen = report(attack("uid"))
    assert int(seen.split("=")[1]) >= UID_BASE, seen


def test_a_laundered_process_start_is_rejected(attack):
    """os.system called from torch's frame (torch.no_grad() as a decorator): refused whoever calls."""
    result = attack("none", candidate="laundered_system", rules=frozenset({"threads-processes"}))
    assert result.verdict is Verdict.REJECTED, describe(result)
    assert "sandbox:threads-processes" in failed(result) and "os.system" in result.message, describe(result)


def test_hooks_switched_off_still_leave_no_shell(attack):
    result = attack("none", candidate="disarm_then_shell", rules=frozenset({"dunder", "import", "threads-processes"}))
    assert result.verdict is Verdict.RUNTIME_ERROR, describe(result)
    assert report(result) == "hooks off, shell exit status 127", describe(result)  # the shell could not start


def test_inputs_cannot_be_known_ahead(attack):
    """The problem's file never runs in the candidate's process, and the global RNG it finds says
    nothing about its inputs."""
    result = attack("none", candidate="predict_inputs", rules=frozenset({"import"}))
    assert report(result) == "problem modules []; predicted False", describe(result)


def test_the_run_sandbox_runs_the_toolchain_triton_needs(attack):
    """The honest side of the exec allowlist: Triton's ptxas and the C compiler (its launchers)
    run (a shell does not: test_no_shell_in_the_run_sandbox)."""
    ptxas = next(iter(b / "ptxas" for b in paths.triton_bins() if (b / "ptxas").exists()), None)
    if ptxas is None:
        pytest.skip("this triton has no bundled ptxas")
    result = attack("none", str(ptxas), candidate="toolchain_probe", rules=frozenset({"import", "file-io", "threads-processes", "own-kernel"}))
    assert report(result) == "ptxas 0 cc 0", describe(result)


# -- the parent believes nothing a worker sends ----------------------------------------------------

FORGERY_RULES = frozenset({"import", "dunder", "threads-processes", "dynamic-code", "file-io", "own-kernel"})


def test_a_worker_cannot_report_success(attack):
    result = attack("none", candidate="forge_ok_verdict", rules=FORGERY_RULES)
    assert result.verdict is Verdict.RUNTIME_ERROR and not result.ok, describe(result)


def test_a_worker_that_stops_reading_cannot_hang_the_evaluator(attack):
    result = attack("none", candidate="forge_stalled_pipe", rules=FORGERY_RULES, trial_timeout=10.0)
    assert result.verdict is Verdict.TIMEOUT, describe(result)
    assert "stopped reading its requests" in result.message, describe(result)


def test_an_oversized_reply_is_refused_before_it_is_read(attack):
    result = attack("none", candidate="forge_flood_reply", rules=FORGERY_RULES)
    assert result.verdict is Verdict.REJECTED and "more than the" in result.message, describe(result)


def test_a_malformed_reply_is_the_candidates_doing(attack):
    result = attack("none", candidate="forge_malformed_reply", rules=FORGERY_RULES)
    assert result.verdict is Verdict.REJECTED and "malformed reply" in result.message, describe(result)


def test_device_memory_announced_beyond_what_the_request_allows_is_refused_before_it_is_mapped(attack):
    result = attack("none", candidate="forge_huge_arena", rules=FORGERY_RULES)
    assert result.verdict is Verdict.REJECTED and "malformed reply" in result.message, describe(result)
    assert "announces 1099511627776 bytes of device memory" in result.message, describe(result)


def test_a_forged_build_reply_is_the_candidates_doing(attack):
    """A wrong kernel whose build reply says its extensions were found built but not how long the
    load took: before, the parent read the missing field and raised (verdict `error`, masked);
    found by an attacker helper reviewing the pipeline (stop 34)."""
    result = attack("none", candidate="forge_cached_build", rules=FORGERY_RULES)
    assert result.verdict is Verdict.REJECTED and "malformed reply" in result.message, describe(result)


@pytest.mark.parametrize("claim", ["string", "short", "negative"])
def test_a_forged_storage_claim_is_the_candidates_doing(attack, claim):
    """A wrong kernel whose reply claims a storage that is no [address, bytes] pair: before,
    the parent's aliasing check raised on it (verdict `error`, an evaluator fault)."""
    result = attack("none", claim, candidate="forge_reply_node", rules=FORGERY_RULES | {"patching"})
    assert result.verdict is Verdict.REJECTED and "malformed output" in result.message, describe(result)
    assert "not [address, bytes]" in result.message, describe(result)


@pytest.mark.parametrize("node, seen", [("float", "an integer of 401 digits"), ("span", "malformed output"),
                                        ("infinite", "a non-finite number (Infinity)")])
def test_a_forged_output_node_is_the_candidates_doing(attack, node, seen):
    """A wrong kernel whose reply carries a node the parent could not turn into a value: before,
    the decoder raised OverflowError or RuntimeError (verdict `error`). A number no reply needs
    (Infinity, NaN, an integer of hundreds of digits) is now refused as the frame is read."""
    result = attack("none", node, candidate="forge_reply_node", rules=FORGERY_RULES | {"patching"})
    assert result.verdict is Verdict.REJECTED and seen in result.message, describe(result)
