"""The `ratchet` command line: a thin dispatcher over one module per subcommand.

Machine-readable output goes to stdout, progress and logs to stderr. Exit codes are in one
table, agent/cli/exit_codes.py, documented in docs/exit-codes.md; a user's mistake ends with a
one-line message, never a traceback. Parsing the command line imports nothing heavy (torch,
triton, openai, langgraph, git, numpy): each command imports what it needs when it runs, so
`--help` and usage errors answer at once (tests/cli/test_cli_fast.py).
"""
from __future__ import annotations

import argparse
import importlib
import os
import sys
from collections.abc import Sequence
from typing import NoReturn

from agent.cli.checks import UsageError
from agent.cli.exit_codes import EXIT_INTERRUPTED, EXIT_OK, EXIT_USAGE

# Each module defines register(subparsers) -> None, which adds its subcommand(s) and sets
# `func` on them: func(args) -> int (the exit code).
COMMAND_MODULES = ("agent.cli.eval", "agent.cli.workspace", "agent.cli.optimize", "agent.cli.batch", "agent.cli.report",
                   "agent.cli.export", "agent.cli.suite", "agent.cli.serve", "agent.cli.extract",
                   "agent.cli.apply")


class Parser(argparse.ArgumentParser):
    """argparse with its errors as one line (`ratchet eval: error: ...; see ratchet eval --help`)
    instead of a usage block and a second line; still exit EXIT_USAGE."""

    def error(self, message: str) -> NoReturn:
        self.exit(EXIT_USAGE, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def build_parser() -> argparse.ArgumentParser:
    from agent.cli.version import VersionAction

    parser = Parser(prog="ratchet", description=__doc__.splitlines()[0])
    parser.add_argument("--version", action=VersionAction)
    subparsers = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name in COMMAND_MODULES:
        importlib.import_module(name).register(subparsers)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    command = " ".join(filter(None, (args.command, getattr(args, "suite_command", None))))
    try:
        return int(args.func(args))
    except UsageError as exc:
        print(f"ratchet {command}: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except BrokenPipeError:  # stdout closed early (`ratchet ... | head`): not an error of ours
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return EXIT_OK
    except KeyboardInterrupt:
        print(f"ratchet {command}: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
