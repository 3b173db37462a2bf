"""Exit codes: one table (agent/cli/exit_codes.py), one page (docs/exit-codes.md) that lists each
command's codes exactly, and no literal exit code left in agent/ or tools/."""
from __future__ import annotations

import ast
import re
from collections import Counter
from pathlib import Path

import pytest

from agent.cli import exit_codes
from agent.cli.exit_codes import COMMANDS, EVAL_EXIT_CODES, TABLE, codes_of
from tools.record import Verdict

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "exit-codes.md"
ROW = re.compile(r"^\|\s*(\d+)\s*\|\s*`(EXIT_[A-Z_]+)`\s*\|\s*(.+?)\s*\|\s*$")


def documented() -> dict[str, list[tuple[int, str]]]:
    """heading -> the (code, name) rows of the table under it."""
    tables: dict[str, list[tuple[int, str]]] = {}
    heading = None
    for line in DOC.read_text().splitlines():
        if line.startswith("## "):
            heading = line[3:].strip().replace("`", "")
            tables[heading] = []
        elif heading is not None and (match := ROW.match(line)):
            assert match.group(3), f"{heading}: code {match.group(1)} has no meaning"
            tables[heading].append((int(match.group(1)), match.group(2)))
    return tables


def test_the_page_lists_every_code_of_every_command():
    tables = documented()
    assert set(tables) == set(COMMANDS), "one table per command of tools/exit_codes.COMMANDS"
    for command in COMMANDS:
        rows = tables[command]
        assert len(rows) == len(set(rows)), f"{command}: a row repeated"
        assert dict(rows) == codes_of(command), f"{command}: docs/exit-codes.md and tools/exit_codes.TABLE differ"


def test_the_table_is_consistent():
    names = [row.name for row in TABLE]
    assert len(names) == len(set(names))
    for row in TABLE:
        assert getattr(exit_codes, row.name) == row.code, row.name  # the constant and its row agree
        assert row.meaning and set(row.commands) <= set(COMMANDS), row.name
    for command in COMMANDS:  # within one command a number means one thing
        counts = Counter(row.code for row in TABLE if command in row.commands)
        assert not [code for code, n in counts.items() if n > 1], command
    constants = {n for n in dir(exit_codes) if n.startswith("EXIT_")}
    assert constants == set(names), "every EXIT_ constant has a row in TABLE"
    # every verdict has its `ratchet eval` code; an evaluator fault is the internal-error code
    assert set(EVAL_EXIT_CODES) == set(Verdict)
    assert EVAL_EXIT_CODES[Verdict.ERROR] == exit_codes.EXIT_INTERNAL == 9
    assert exit_codes.EXIT_SANDBOX == 13
    assert len(set(EVAL_EXIT_CODES.values())) == len(Verdict)
    with pytest.raises(ValueError):
        codes_of("ratchet nothing")


def _literal_exits(path: Path) -> list[str]:
    """Exit codes written as literals: sys.exit(N) / os._exit(N) / exit(N) anywhere, and
    `return N` in a command's entry function (main, run, run_*)."""
    found = []
    tree = ast.parse(path.read_text())
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant) \
                and isinstance(node.args[0].value, int):
            fn = node.func
            name = fn.attr if isinstance(fn, ast.Attribute) else getattr(fn, "id", "")
            if name in ("exit", "_exit"):
                found.append(f"{path.relative_to(ROOT)}:{node.lineno}")
        if isinstance(node, ast.FunctionDef) and (node.name in ("main", "run") or node.name.startswith("run_")):
            for sub in ast.walk(node):
                if isinstance(sub, ast.Return) and isinstance(sub.value, ast.Constant) \
                        and isinstance(sub.value.value, int) and not isinstance(sub.value.value, bool):
                    found.append(f"{path.relative_to(ROOT)}:{sub.lineno}")
    return found


def test_no_literal_exit_codes_in_agent_or_tools():
    files = sorted((ROOT / "agent").rglob("*.py")) + sorted((ROOT / "tools").rglob("*.py"))
    found = [hit for path in files for hit in _literal_exits(path)]
    assert not found, f"use agent/cli/exit_codes.py: {found}"
