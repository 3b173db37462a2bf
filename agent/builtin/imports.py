"""The drafted module's imports, each once and all at the top.

A draft is the template's own imports followed by the reference's prelude (its imports and the
module-level definitions its constructor needs), so `import torch` and `import torch.nn as nn`
came twice. `hoist_imports` gathers every top-level import of the rendered source, drops the
repeats (first occurrence wins, per imported name), and writes them once under the module
docstring: `__future__` imports first, then the standard library, then the rest, each group in
the order first seen. Imports inside functions, classes, `if` or `try` blocks are left alone.
"""
from __future__ import annotations

import ast
import sys

_STDLIB = frozenset(sys.stdlib_module_names)


def hoist_imports(source: str) -> str:
    """`source` with its top-level imports deduplicated and moved under the docstring.

    A source that does not parse is returned as it is: the evaluator reports its syntax error
    to whoever submits it. So is one whose imports share a line with other statements (`a; b`),
    where moving lines would move code too."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return source
    body = tree.body
    imports = [n for n in body if isinstance(n, (ast.Import, ast.ImportFrom))]
    if not imports:
        return source
    others = [n for n in body if not isinstance(n, (ast.Import, ast.ImportFrom))]
    import_lines = {line for n in imports for line in range(n.lineno, n.end_lineno + 1)}
    if any(line in import_lines for n in others for line in range(n.lineno, n.end_lineno + 1)):
        return source
    lines = source.splitlines(keepends=True)
    docstring = body[0] if _is_docstring(body[0]) else None
    cut = docstring.end_lineno if docstring is not None else 0
    if any(n.lineno <= cut for n in imports):  # an import on the docstring's line
        return source
    header = "".join(lines[:cut])
    rest = _without_lines(lines, cut, import_lines).lstrip("\n")
    block = "\n\n".join("\n".join(group) for group in _unique_imports(imports) if group)
    parts = [header.rstrip("\n") + "\n" if header else "", block + "\n"]
    if rest:
        parts.append("\n\n" + rest)
    return "".join(parts)


def _is_docstring(node: ast.stmt) -> bool:
    return isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant) and isinstance(node.value.value, str)


def _unique_imports(imports: list[ast.Import | ast.ImportFrom]) -> tuple[list[str], list[str], list[str]]:
    """(future, standard library, other) import lines, each imported name once, in first-seen order."""
    seen: set[tuple[str, str, str | None]] = set()
    future: list[str] = []
    stdlib: list[str] = []
    other: list[str] = []
    for node in imports:
        if isinstance(node, ast.Import):
            for alias in node.names:
                key = ("import", alias.name, alias.asname)
                if key not in seen:
                    seen.add(key)
                    group = stdlib if alias.name.split(".")[0] in _STDLIB else other
                    group.append(ast.unparse(ast.Import(names=[alias])))
            continue
        module = "." * node.level + (node.module or "")
        fresh = [a for a in node.names if (module, a.name, a.asname) not in seen]
        if not fresh:
            continue
        seen.update((module, a.name, a.asname) for a in fresh)
        line = ast.unparse(ast.ImportFrom(module=node.module, names=fresh, level=node.level))
        if node.module == "__future__":
            future.append(line)
        elif node.level == 0 and (node.module or "").split(".")[0] in _STDLIB:
            stdlib.append(line)
        else:
            other.append(line)
    return future, stdlib, other


def _without_lines(lines: list[str], start: int, removed: set[int]) -> str:
    """Lines after the first `start`, those numbered in `removed` dropped; a run of blank lines
    around a dropped line keeps at most two (lines elsewhere, in strings too, stay as they are)."""
    out: list[str] = []
    blanks: list[str] = []
    touched = False
    for number, line in enumerate(lines[start:], start=start + 1):
        if number in removed:
            touched = True
        elif not line.strip():
            blanks.append(line)
        else:
            out.extend(blanks[:2] if touched else blanks)
            out.append(line)
            blanks, touched = [], False
    out.extend(blanks[:2] if touched else blanks)
    return "".join(out)
