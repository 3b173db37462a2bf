"""Where an expression is used, for the static gate (tools/guard/scan.py): some names are fine in one
position and not in another. A module is fine as the base of an attribute or bound to a plain
name, not passed around as a value; an attribute named like a module is fine when it is called
(a module is not callable); a data pointer is fine inside an alignment test, nowhere else.
"""
from __future__ import annotations

import ast

Parents = dict[int, ast.AST]

# Largest alignment an alignment test may ask about (bytes): enough for vector loads, TMA, pages.
MAX_ALIGNMENT = 4096


def parents_of(tree: ast.AST) -> Parents:
    parents: Parents = {}
    for node in ast.walk(tree):
        for child in ast.iter_child_nodes(node):
            parents[id(child)] = node
    return parents


def called(node: ast.AST, parents: Parents) -> bool:
    """node is the function of a call: node(...)."""
    parent = parents.get(id(node))
    return isinstance(parent, ast.Call) and parent.func is node


def attribute_base(node: ast.AST, parents: Parents) -> bool:
    """node is read for one of its attributes: node.x."""
    parent = parents.get(id(node))
    return isinstance(parent, ast.Attribute) and parent.value is node


def bound_to_name(node: ast.AST, parents: Parents) -> bool:
    """node is the whole value of a plain `name = node` (the gate follows the name)."""
    parent = parents.get(id(node))
    return (isinstance(parent, ast.Assign) and parent.value is node
            and all(isinstance(t, ast.Name) for t in parent.targets))


def _int(node: ast.AST) -> int | None:
    if isinstance(node, ast.Constant) and type(node.value) is int:
        return node.value
    return None


def _alignment_operator(binop: ast.BinOp) -> bool:
    """`p % 16` (a power of two) or `p & 15` (a power of two less one), at most MAX_ALIGNMENT."""
    value = _int(binop.right)
    if value is None or value <= 0 or value > MAX_ALIGNMENT:
        return False
    if isinstance(binop.op, ast.Mod):
        return value > 1 and value & (value - 1) == 0
    if isinstance(binop.op, ast.BitAnd):
        return (value + 1) & value == 0
    return False


def _in_condition(node: ast.AST, parents: Parents) -> bool:
    """node's value decides a branch and goes nowhere else: an if/while/assert test, a ternary's
    or comprehension's condition, `not node`, or an and/or that is itself in a condition."""
    parent = parents.get(id(node))
    if isinstance(parent, (ast.If, ast.While, ast.IfExp, ast.Assert)):
        return parent.test is node
    if isinstance(parent, ast.comprehension):
        return node in parent.ifs
    if isinstance(parent, ast.UnaryOp) and isinstance(parent.op, ast.Not):
        return True
    if isinstance(parent, ast.BoolOp):
        return _in_condition(parent, parents)
    return False


def alignment_test(attribute: ast.Attribute, parents: Parents) -> bool:
    """x.data_ptr() used only to test alignment: `x.data_ptr() % 16 == 0`, `x.data_ptr() & 15`
    in a condition. The pointer itself is never stored, keyed on, compared or passed anywhere:
    what comes out is one bit."""
    call = parents.get(id(attribute))
    if not (isinstance(call, ast.Call) and call.func is attribute and not call.args and not call.keywords):
        return False
    binop = parents.get(id(call))
    if not (isinstance(binop, ast.BinOp) and binop.left is call and _alignment_operator(binop)):
        return False
    compare = parents.get(id(binop))
    if isinstance(compare, ast.Compare):
        operands = [compare.left, *compare.comparators]
        return all(o is binop or _int(o) is not None for o in operands)
    return _in_condition(binop, parents)
