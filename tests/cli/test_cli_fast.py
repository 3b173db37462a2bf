"""Fast answers: `--help`, `--version` and usage errors import none of the heavy modules.

Each case runs the real command in a fresh process under `python -X importtime`, which lists
every module the process imported on stderr; none may be torch, triton, openai, langgraph,
gitpython or numpy. No wall-clock limit is asserted here: benchmarks/cli_speed.py times these
commands against `import torch`.
"""
from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from agent.cli.exit_codes import EXIT_OK, EXIT_USAGE

ROOT = Path(__file__).resolve().parents[2]
HEAVY = ("torch", "triton", "openai", "langgraph", "git", "numpy")
EXAMPLE = str(ROOT / "examples" / "swish_problem.py")
CANDIDATE = str(ROOT / "examples" / "swish_candidate.py")


def run_cli(args: list[str], cwd: Path = ROOT) -> tuple[int, str, str, set[str]]:
    """(exit code, stdout, stderr without the import lines, top-level names of every imported module)."""
    proc = subprocess.run([sys.executable, "-X", "importtime", "-m", "agent.cli", *args], cwd=cwd,
                          capture_output=True, text=True, timeout=120)
    imported, stderr = set(), []
    for line in proc.stderr.splitlines():
        if line.startswith("import time:"):
            name = line.rsplit("|", 1)[1].strip()
            if name != "package":  # the header line
                imported.add(name.split(".")[0])
        else:
            stderr.append(line)
    return proc.returncode, proc.stdout, "\n".join(stderr), imported


HELP = [[], ["eval"], ["optimize"], ["batch"], ["report"], ["export"], ["suite"], ["suite", "check"], ["log"],
        ["show"], ["best"]]


@pytest.mark.parametrize("command", HELP, ids=[" ".join(c) or "ratchet" for c in HELP])
def test_help_imports_nothing_heavy(command):
    code, out, err, imported = run_cli([*command, "--help"])
    assert code == EXIT_OK, err
    assert out.startswith("usage: ratchet") and err == ""
    assert not imported & set(HEAVY), sorted(imported & set(HEAVY))


def test_version_imports_nothing_heavy():
    from agent.cli.version import version

    code, out, err, imported = run_cli(["--version"])
    assert code == EXIT_OK and err == ""
    assert out.strip() == f"ratchet {version()}" != "ratchet unknown"
    assert not imported & set(HEAVY), sorted(imported & set(HEAVY))


def test_the_version_falls_back_to_pyproject(tmp_path):
    """Not installed (a source tree run as it is): the version in pyproject.toml's [project] table."""
    from agent.cli.version import PYPROJECT, source_version

    assert source_version(PYPROJECT) == re.search(r'^version = "(.+)"', PYPROJECT.read_text(), re.M).group(1)
    (tmp_path / "pyproject.toml").write_text('[tool.x]\nversion = "9"\n[project]\nname = "x"\nversion = "1.2.3"\n')
    assert source_version(tmp_path / "pyproject.toml") == "1.2.3"
    assert source_version(tmp_path / "missing.toml") == "unknown"


USAGE_ERRORS = [  # (arguments, what the one line says)
    (["eval", EXAMPLE, CANDIDATE, "--bogus"], "unrecognized arguments: --bogus"),
    (["optimize"], "the following arguments are required: MODULE.py"),
    (["export", "ws", "--format", "csv"], "invalid choice: 'csv'"),
    (["eval", EXAMPLE, CANDIDATE, "--trials", "x"], "invalid int value: 'x'"),
    (["eval", "no_such_problem.py", CANDIDATE], "no_such_problem.py: cannot read the reference: no such file"),
    (["eval", EXAMPLE, "no_such_candidate.py"], "no_such_candidate.py: cannot read the candidate: no such file"),
    (["optimize", "no_such_problem.py"], "no_such_problem.py: cannot read the problem module: no such file"),
    (["eval", EXAMPLE, CANDIDATE, "--device", "tpu"], "--device tpu: expected cpu, cuda or cuda:N"),
    (["eval", EXAMPLE, CANDIDATE, "--trials", "0"], "--trials must be at least 1"),
    (["optimize", EXAMPLE, "--roofline-target", "1.5"], "roofline_target must be in [0, 1], 0 for no roofline stop"),
    (["suite", "check", "no_such_dir"], "no_such_dir: no such directory"),
    (["report", "no_such_run"], "no_such_run: no results.jsonl"),
    (["batch", "no_such_suite"], "no_such_suite: not a directory"),
]


@pytest.mark.parametrize("args,says", USAGE_ERRORS, ids=[" ".join(a[:2]) + f" ({s[:24]})" for a, s in USAGE_ERRORS])
def test_usage_errors_import_nothing_heavy(args, says):
    code, out, err, imported = run_cli(args)
    assert code == EXIT_USAGE
    assert out == "" and len(err.splitlines()) == 1 and says in err and "Traceback" not in err, err
    assert not imported & set(HEAVY), sorted(imported & set(HEAVY))
