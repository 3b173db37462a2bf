"""What the command-line error tests (tests/cli/test_cli_*errors.py) assert of a failed command."""
from __future__ import annotations

import subprocess


def one_line(proc: subprocess.CompletedProcess, code: int, *fragments: str) -> str:
    """Assert the exit code, a single stderr line holding every fragment, and no traceback."""
    assert proc.returncode == code, (proc.returncode, proc.stderr)
    assert "Traceback" not in proc.stderr, proc.stderr
    lines = proc.stderr.splitlines()
    assert len(lines) == 1, proc.stderr
    for fragment in fragments:
        assert fragment in lines[0], (fragment, lines[0])
    return lines[0]
