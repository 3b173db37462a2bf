"""The workspace tests' shared fixtures: a problem file and an empty workspace root, per test."""
from __future__ import annotations

from pathlib import Path

import pytest

from agent.workspace.root import Workspace
from helpers_workspace import write_problem


@pytest.fixture
def problem(tmp_path: Path) -> Path:
    return write_problem(tmp_path / "problems" / "19_ReLU.py")


@pytest.fixture
def ws(tmp_path: Path) -> Workspace:
    return Workspace(tmp_path / "ws", lock_timeout=30)
