"""ratchet's version, for `ratchet --version`: the installed package's metadata, else (running from
a source tree that was never installed) the version in the tree's pyproject.toml."""
from __future__ import annotations

import argparse
import re
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any, NoReturn

from agent.cli.exit_codes import EXIT_OK

DISTRIBUTION = "kernel-ratchet"  # [project] name in pyproject.toml
PYPROJECT = Path(__file__).resolve().parents[2] / "pyproject.toml"


def version() -> str:
    from importlib.metadata import PackageNotFoundError
    from importlib.metadata import version as installed_version

    try:
        return installed_version(DISTRIBUTION)
    except PackageNotFoundError:
        return source_version(PYPROJECT)


def source_version(pyproject: Path) -> str:
    """`version` of the [project] table, or "unknown" when the file is not there or says none."""
    try:
        text = pyproject.read_text()
    except OSError:
        return "unknown"
    # the [project] table up to the next table header; a regex keeps tomllib (3.11+) out of it
    table = re.search(r"^\[project\]\s*$(.*?)(?=^\[|\Z)", text, re.M | re.S)
    found = table and re.search(r"""^version\s*=\s*["']([^"']+)["']""", table.group(1), re.M)
    return found.group(1) if found else "unknown"


class VersionAction(argparse.Action):
    """`--version`: print `ratchet X.Y.Z` and exit; the version is looked up only when asked."""

    def __init__(self, option_strings: Sequence[str], dest: str = argparse.SUPPRESS, **kwargs: Any) -> None:
        super().__init__(option_strings, dest, nargs=0, default=argparse.SUPPRESS,
                         help="print ratchet's version and exit", **kwargs)

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: Any,
                 option_string: str | None = None) -> NoReturn:
        print(f"ratchet {version()}", file=sys.stdout)
        parser.exit(EXIT_OK)
