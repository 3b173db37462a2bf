"""A bad price is one line and exit 2 (EXIT_USAGE), before any work: a typo'd model name in the
config file's [prices] table, a malformed entry, a malformed --price or RATCHET_PRICE. Each case
runs the real command in a subprocess (`python -m agent.cli`), as tests/cli/test_cli_errors.py does.
The model named needs no endpoint to answer: the price is checked before any request."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from agent.cli.exit_codes import EXIT_USAGE
from helpers_cli import one_line

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = str(ROOT / "examples" / "swish_problem.py")
NOWHERE = "http://127.0.0.1:9/v1"  # never asked: the price is checked first
TYPO = '[prices."qwen2.5-coder-32"]\ninput = 0.2\noutput = 0.6\n'


def ratchet(*args: str, cwd: Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    base = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "RATCHET_"))}
    return subprocess.run([sys.executable, "-m", "agent.cli", *args], cwd=cwd, env={**base, **(env or {})},
                          capture_output=True, text=True, timeout=240)


@pytest.mark.parametrize("command", ["optimize", "batch"])
def test_a_typo_in_the_price_table_is_one_line_naming_the_file(tmp_path, command):
    config = tmp_path / "prices.toml"
    config.write_text(TYPO)
    where = [EXAMPLE] if command == "optimize" else [str(ROOT / "suite"), "--filter", "^01_", "--out",
                                                     str(tmp_path / "run"), "--cpu-workers", "1"]
    proc = ratchet(command, *where, "--model", "qwen2.5-coder-32b", "--base-url", NOWHERE, "--config", str(config),
                   "--workspace", str(tmp_path / "ws"), cwd=tmp_path)
    one_line(proc, EXIT_USAGE, f"ratchet {command}: config file {config}", "'qwen2.5-coder-32b'",
             "'qwen2.5-coder-32': a typo?")
    assert not (tmp_path / "ws").exists() and not (tmp_path / "run").exists()  # nothing begun


@pytest.mark.parametrize("args, env, config, says", [
    (["--price", "0.2"], {}, None, "command line: bad value for price: '0.2' is not INPUT,OUTPUT"),
    ([], {"RATCHET_PRICE": "0.2,-1"}, None, "environment: price's output must be a finite number"),
    ([], {}, '[prices.m]\ninput = 0.2\nouput = 0.6\n', "[prices.m]: unknown key 'ouput'"),
], ids=["flag", "environment", "table key"])
def test_a_malformed_price_is_one_line(tmp_path, args, env, config, says):
    if config is not None:
        (tmp_path / "ratchet.toml").write_text(config)  # ./ratchet.toml, read when present
    proc = ratchet("optimize", EXAMPLE, "--model", "m", "--base-url", NOWHERE, "--workspace", str(tmp_path / "ws"),
                   *args, cwd=tmp_path, env=env)
    one_line(proc, EXIT_USAGE, "ratchet optimize: ", says)
