"""`ratchet extract`'s mistakes: one line on stderr naming the option, a documented exit code,
never a traceback (docs/exit-codes.md)."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from agent.cli import main
from agent.cli.exit_codes import EXIT_USAGE, EXIT_USER_MODEL
from helpers_cli import one_line

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
MODELS = f"{HERE}/models.py"

CASES = [  # (arguments after MODEL, MODEL, code, fragments of the line)
    ([ "--shape", "4x8"], f"{HERE}/nothing.py:Net", EXIT_USAGE, ["MODEL", "no such file"]),
    (["--shape", "4x8"], f"{MODELS}:Nope", EXIT_USAGE, ["MODEL", "has no attribute Nope"]),
    (["--shape", "4x8"], "no_such_package_xyz.models:make", EXIT_USAGE, ["MODEL", "cannot import no_such_package_xyz"]),
    (["--shape", "4x8"], "models_without_colon", EXIT_USAGE, ["MODEL", "expected MODULE:NAME"]),
    (["--shape", "4by8"], f"{MODELS}:make_mlp", EXIT_USAGE, ["--shape 4by8", "expected SIZExSIZE"]),
    (["--shape", "4x8:float33"], f"{MODELS}:make_mlp", EXIT_USAGE, ["--shape 4x8:float33", "unknown dtype"]),
    (["--shape", "4x8:int64"], f"{MODELS}:make_mlp", EXIT_USAGE, ["--shape 4x8:int64", "upper bound"]),
    ([], f"{MODELS}:make_mlp", EXIT_USAGE, ["no example inputs", "--shape"]),
    (["--shape", "4x8", "--init-args", "{oops"], f"{MODELS}:Block", EXIT_USAGE, ["--init-args", "not JSON"]),
    (["--shape", "4x3"], f"{MODELS}:broken", EXIT_USER_MODEL, ["MODEL", "forward on the example inputs raised RuntimeError"]),
    (["--shape", "4x3", "--init-args", "[1, 2, 3]"], f"{MODELS}:Block", EXIT_USER_MODEL, ["MODEL", "TypeError"]),
    (["--inputs", f"{MODELS}:HEAD_DIM"], f"{MODELS}:make_mlp", EXIT_USAGE, ["--inputs", "not callable"]),
]


@pytest.mark.parametrize("extra,model,code,fragments", CASES, ids=[f"{c[3][0]}-{i}" for i, c in enumerate(CASES)])
def test_a_mistake_is_one_line_and_its_exit_code(tmp_path, capsys, extra, model, code, fragments):
    """In this process (fast): agent.cli.main, as the command runs it."""
    argv = ["extract", model, *extra, "--out", str(tmp_path / "out"), "--device", "cpu"]
    returned = main(argv)
    out, err = capsys.readouterr()
    line = one_line(subprocess.CompletedProcess(argv, returned, out, err), code, *fragments)
    assert line.startswith("ratchet extract: ")
    assert not (tmp_path / "out" / "manifest.json").exists()


def test_a_model_that_fails_is_one_line_from_the_real_command(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "agent.cli", "extract", f"{MODELS}:broken", "--shape", "4x3",
                           "--out", str(tmp_path / "out")], cwd=ROOT, capture_output=True, text=True, timeout=120)
    one_line(proc, EXIT_USER_MODEL, "ratchet extract: MODEL", "forward on the example inputs raised")


def test_an_output_directory_in_the_way_is_a_usage_error(tmp_path, capsys):
    (tmp_path / "taken.txt").write_text("mine")
    assert main(["extract", f"{MODELS}:make_mlp", "--shape", "4x64", "--out", str(tmp_path)]) == EXIT_USAGE
    assert "--out" in capsys.readouterr().err
