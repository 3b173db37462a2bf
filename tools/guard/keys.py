"""The static gate's checks on reads by key and by pattern: a subscript, `.get`/`.pop`/`.setdefault`
(called from tools/guard/scan.py's visit_Attribute) and a mapping pattern with a constant key naming a
dunder or a banned builtin (`g['__builtins__']`, `b.get('exec')`, `case {'open': f}`), and class
patterns with sub-patterns, which read attributes by name with no Attribute node. Mixed into
tools/guard/scan.py's visitor, which provides flag().
"""
from __future__ import annotations

import ast

from tools.guard.names import ALLOWED_DUNDER_NAMES, KEYED_BUILTINS


def dunder(name: str) -> bool:
    return name.startswith("__") and name.endswith("__")


class KeyChecks(ast.NodeVisitor):
    def flag(self, rule: str, node: ast.AST, message: str) -> None:
        raise NotImplementedError

    def visit_MatchClass(self, node: ast.MatchClass) -> None:
        # a class pattern reads attributes by name, as getattr does (`case object(__globals__=g)`),
        # with no Attribute node for visit_Attribute to see. Keyword sub-patterns are refused, and so
        # are positional ones, whatever the class is called: they read what the class's
        # __match_args__ names, and `int` may be any class a module binds to that name (stop 29)
        if node.kwd_attrs:
            self.flag("dynamic-code", node, f"reads attributes by name in a class pattern ({', '.join(node.kwd_attrs)}); read them as attributes")
        elif node.patterns:
            self.flag("dynamic-code", node, "reads attributes in a class pattern (through __match_args__); "
                      "match the class alone (`case int() as n`) and read attributes as attributes")
        self.generic_visit(node)

    def visit_MatchMapping(self, node: ast.MatchMapping) -> None:
        for key in node.keys:  # `case {'__builtins__': b}` reads by key, as a subscript does
            self.check_key(key, node)
        self.generic_visit(node)

    def check_key(self, key: ast.AST, node: ast.AST) -> None:
        """A constant string key that names a dunder or a banned builtin: `g['__builtins__']`,
        `b.get('exec')`. Reading a namespace by key is reading it by attribute."""
        if not (isinstance(key, ast.Constant) and isinstance(key.value, str)):
            return
        if dunder(key.value) and key.value not in ALLOWED_DUNDER_NAMES:
            self.flag("dunder", node, f"touches {key.value} by key")
        elif key.value in KEYED_BUILTINS:
            self.flag("dynamic-code", node, f"reads the builtin {key.value} by key")

    def visit_Subscript(self, node: ast.Subscript) -> None:
        self.check_key(node.slice, node)
        self.generic_visit(node)
