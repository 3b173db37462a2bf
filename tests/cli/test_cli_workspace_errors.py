"""A workspace that cannot be used is one line and exit 2, before any work, in every command.

Each case runs the real command in a subprocess. An unreadable workspace needs a user the
permission bits apply to: as root (CI), the command runs with CAP_DAC_OVERRIDE and
CAP_DAC_READ_SEARCH dropped from its bounding set (`setpriv`), so it is refused as any other user
would be; as another user, the bits alone do it.
"""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from agent.cli.exit_codes import EXIT_USAGE
from agent.workspace.root import Workspace
from helpers_cli import one_line

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "swish_problem.py"
NO_DAC = ["--bounding-set=-dac_override,-dac_read_search"]


def _confined_prefix() -> list[str] | None:
    """What runs a command with file permissions enforced; None when this machine cannot."""
    if os.geteuid() != 0:
        return []
    setpriv = shutil.which("setpriv")
    if setpriv is None or subprocess.run([setpriv, *NO_DAC, "true"], capture_output=True).returncode != 0:
        return None
    return [setpriv, *NO_DAC]


PREFIX = _confined_prefix()
needs_permissions = pytest.mark.skipif(PREFIX is None, reason="root here, and setpriv cannot drop CAP_DAC_OVERRIDE")


def ratchet(*args: str, confined: bool = False) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "RATCHET_"))}
    prefix = (PREFIX or []) if confined else []
    return subprocess.run([*prefix, sys.executable, "-m", "agent.cli", *args], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=240)


@pytest.fixture
def workspace(tmp_path):
    """A workspace root holding the example's repository (its reference commit)."""
    root = tmp_path / "ws"
    with Workspace(root).open_problem(EXAMPLE) as repo:
        path = repo.path
    yield root, path
    for p in (root, path):
        p.chmod(0o755)  # let pytest clean up


def optimize_args(root: Path) -> list[str]:
    return ["optimize", str(EXAMPLE), "--workspace", str(root), "--model", "builtin", "--max-attempts", "1"]


def batch_args(root: Path, out: Path) -> list[str]:
    return ["batch", str(EXAMPLE.parent), "--filter", f"^{EXAMPLE.stem}$", "--workspace", str(root),
            "--model", "builtin", "--max-attempts", "1", "--cpu-workers", "1", "--out", str(out)]


@needs_permissions
@pytest.mark.parametrize("which", ["repository", "root"])
def test_an_unreadable_workspace_is_named_by_every_command(workspace, tmp_path, which):
    root, repo = workspace
    (repo if which == "repository" else root).chmod(0)
    commands = {
        "log": ["log", str(EXAMPLE), "--workspace", str(root)],
        "show": ["show", str(EXAMPLE), "1", "--workspace", str(root)],
        "best": ["best", str(EXAMPLE), "--workspace", str(root), "-o", str(tmp_path / "best.py")],
        "export": ["export", str(root), "--format", "sft", "--out", str(tmp_path / "x.jsonl")],
        "optimize": optimize_args(root),
        "batch": batch_args(root, tmp_path / "run"),
    }
    for name, args in commands.items():
        line = one_line(ratchet(*args, confined=True), EXIT_USAGE, f"ratchet {name}: ", "cannot read ", "Permission denied")
        assert str(root) in line, line  # the root or the repository below it, never "no workspace"
    assert not (tmp_path / "run").exists() and not (tmp_path / "x.jsonl").exists() and not (tmp_path / "best.py").exists()


@needs_permissions
def test_a_read_only_workspace_is_refused_before_any_work(workspace):
    root, repo = workspace
    repo.chmod(0o555)
    one_line(ratchet(*optimize_args(root), confined=True), EXIT_USAGE, "ratchet optimize: cannot write in ", str(repo))
    assert Workspace(root).open_existing(EXAMPLE.stem).attempts() == []


@needs_permissions
def test_a_workspace_root_that_cannot_be_created_is_refused(tmp_path):
    parent = tmp_path / "locked"
    parent.mkdir(mode=0o555)
    try:
        one_line(ratchet(*optimize_args(parent / "ws"), confined=True), EXIT_USAGE, "ratchet optimize: cannot create ",
                 f"{parent} is not writable")
        one_line(ratchet(*batch_args(parent / "ws", tmp_path / "run"), confined=True), EXIT_USAGE, "ratchet batch: --workspace: ")
    finally:
        parent.chmod(0o755)
    assert not (parent / "ws").exists() and not (tmp_path / "run").exists()


def test_a_workspace_below_a_file_is_one_line_in_optimize_and_batch(tmp_path):
    blocker = tmp_path / "afile"
    blocker.write_text("not a directory\n")
    one_line(ratchet(*optimize_args(blocker / "ws")), EXIT_USAGE, "ratchet optimize: cannot use ", f"{blocker} is not a directory")
    one_line(ratchet(*batch_args(blocker / "ws", tmp_path / "run")), EXIT_USAGE, "ratchet batch: --workspace: ",
             f"{blocker} is not a directory")
    assert not (tmp_path / "run").exists()


def test_a_foreign_directory_in_the_problems_place_is_refused_before_any_work(tmp_path):
    root = tmp_path / "ws"
    foreign = root / EXAMPLE.stem
    foreign.mkdir(parents=True)
    (foreign / "notes.txt").write_text("mine\n")
    one_line(ratchet(*optimize_args(root)), EXIT_USAGE, "ratchet optimize: ", str(foreign), "not a ratchet workspace")
    one_line(ratchet(*batch_args(root, tmp_path / "run")), EXIT_USAGE, "ratchet batch: --workspace: ", "not a ratchet workspace")
    assert sorted(p.name for p in foreign.iterdir()) == ["notes.txt"] and not (tmp_path / "run").exists()
