"""The static gate's checks on calls that reach attributes or write through a function instead of
an attribute or an assignment: operator.attrgetter / methodcaller (getattr by string),
operator.setitem and the in-place operators (an assignment into a module or os.environ), and
functools.update_wrapper / wraps (a setattr of a whole __dict__). Mixed into tools/guard/scan.py's
visitor, which provides resolve(), flag() and reaching_anywhere.
"""
from __future__ import annotations

import ast

from tools.guard.names import ATTRIBUTE_COPIERS, FRAME_ATTRIBUTES, STRING_ACCESS, WORKER_ATTRIBUTES

# operator's in-place and item-writing functions: operator.setitem(os.environ, k, v) is an assignment
ITEM_WRITERS = frozenset({"operator.setitem", "operator.delitem"} | {
    f"operator.i{op}" for op in ("add", "and", "concat", "floordiv", "lshift", "mod", "mul", "matmul", "or",
                                 "pow", "rshift", "sub", "truediv", "xor")})
# what a candidate may pass around only by calling it (see _Visitor._check_value in tools/guard/scan.py)
CALL_ONLY = STRING_ACCESS | ATTRIBUTE_COPIERS | ITEM_WRITERS


class CallChecks:
    reaching_anywhere: frozenset[str]

    def resolve(self, node: ast.AST) -> str | None:
        raise NotImplementedError

    def flag(self, rule: str, node: ast.AST, message: str) -> None:
        raise NotImplementedError

    def check_call(self, node: ast.Call, dotted: str | None) -> None:
        if isinstance(node.func, ast.Name) and node.func.id == "type" and len(node.args) == 3:
            self.flag("dynamic-code", node, "creates a class with type(name, bases, namespace), out of the gate's sight")
        if dotted in STRING_ACCESS:
            self._check_string_access(node, dotted)
        if dotted in ITEM_WRITERS and node.args and self._imported_value(node.args[0]):
            self.flag("patching", node, f"{dotted} writes into {self.resolve(node.args[0])}")
        if dotted in ATTRIBUTE_COPIERS:
            positional = 2 if dotted == "functools.update_wrapper" else 1
            if len(node.args) > positional or any(k.arg in ("assigned", "updated", None) for k in node.keywords):
                self.flag("dynamic-code", node, f"{dotted} with its own attribute names: attribute access by string")
            if dotted == "functools.update_wrapper" and node.args and self._imported_value(node.args[0]):
                self.flag("patching", node, f"{dotted} writes attributes into {self.resolve(node.args[0])}")
        wrapped = node.func
        if (isinstance(wrapped, ast.Call) and self.resolve(wrapped.func) == "functools.wraps" and node.args
                and self._imported_value(node.args[0])):
            self.flag("patching", node, f"functools.wraps(...) writes attributes into {self.resolve(node.args[0])}")

    def _imported_value(self, node: ast.AST) -> bool:
        """node stands for something reached from an import: a module, or one of its attributes."""
        return isinstance(node, (ast.Name, ast.Attribute)) and self.resolve(node) is not None

    def _check_string_access(self, node: ast.Call, dotted: str) -> None:
        """operator.attrgetter / methodcaller read attributes by name: only literal names, and none
        that the gate would reject as an attribute or that belong to the worker's own state."""
        names = node.args if dotted == "operator.attrgetter" else node.args[:1]
        literal = [a.value for a in names if isinstance(a, ast.Constant) and isinstance(a.value, str)]
        if not names or len(literal) < len(names) or (dotted == "operator.attrgetter" and node.keywords):
            self.flag("dynamic-code", node, f"{dotted} with a name that is not a literal string: attribute access by a computed name is getattr")
            return
        for name in literal:
            for part in name.split("."):
                why = self._string_attribute(part)
                if why:
                    self.flag("dynamic-code", node, f"{dotted}({name!r}) reads {part}, {why}")
                    return

    def _string_attribute(self, part: str) -> str | None:
        if part.startswith("_"):
            return "a dunder or private attribute"
        if part in FRAME_ATTRIBUTES:
            return "a frame attribute"
        if part in self.reaching_anywhere or part == "os":
            return "a module"
        if part in WORKER_ATTRIBUTES:
            return "the evaluator's own state (its sandbox, launch counter or worker)"
        return None
