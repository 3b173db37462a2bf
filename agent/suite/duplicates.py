"""Near-duplicate problems: pairs whose normalized code is the same, or nearly.

Code is normalized (docstrings and comments dropped, local names renamed canonically) and
compared whole, up to numeric constants (sizes, hyper-parameters), and by the operations
(calls and operators) its computation uses, imports and input makers aside (difflib ratio over
tokens, at least `threshold` alike).
"""
from __future__ import annotations

import ast
import builtins
import difflib
import io
import itertools
import re
import tokenize

DEFAULT_SIMILARITY = 0.9
_KEEP = set(dir(builtins)) | {"self", "Model", "forward", "get_inputs", "get_init_inputs", "__init__", "super"}
_TOKEN = re.compile(r"\w+|[^\s\w]")


def normalized(source: str, *, constants: bool = True) -> ast.Module | None:
    """The code's AST with docstrings dropped and local names renamed canonically (imports,
    builtins and the problem contract's names kept); numbers masked unless `constants`."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return None
    imported = {(a.asname or a.name).split(".")[0] for node in ast.walk(tree)
                if isinstance(node, (ast.Import, ast.ImportFrom)) for a in node.names}
    keep = _KEEP | imported
    names: dict[str, str] = {}

    def rename(name: str) -> str:
        if name in keep:
            return name
        return names.setdefault(name, f"v{len(names)}")

    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and body:
            if isinstance(body[0], ast.Expr) and isinstance(getattr(body[0], "value", None), ast.Constant) \
                    and isinstance(body[0].value.value, str):
                node.body = body[1:] or [ast.Pass()]
    for node in ast.walk(tree):
        if isinstance(node, ast.Name):
            node.id = rename(node.id)
        elif isinstance(node, ast.arg):
            node.arg = rename(node.arg)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            node.name = rename(node.name)
        elif not constants and isinstance(node, ast.Constant) and isinstance(node.value, (int, float, complex)) \
                and not isinstance(node.value, bool):
            node.value = 0
    return tree


def computation(tree: ast.Module) -> ast.Module:
    """The part of a problem that computes: no imports, no get_inputs / get_init_inputs."""
    body = [n for n in tree.body if not isinstance(n, (ast.Import, ast.ImportFrom))
            and not (isinstance(n, ast.FunctionDef) and n.name in ("get_inputs", "get_init_inputs"))]
    return ast.Module(body=body, type_ignores=[])


def operations(tree: ast.AST) -> list[str]:
    """The ops a computation uses: called names (torch.relu, F.softplus, nn.Conv2d) and operators."""
    ops = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            func = node.func
            ops.append(func.attr if isinstance(func, ast.Attribute) else ast.unparse(func))
        elif isinstance(node, (ast.BinOp, ast.UnaryOp, ast.AugAssign)):
            ops.append(type(node.op).__name__)
        elif isinstance(node, ast.Compare):
            ops.extend(type(op).__name__ for op in node.ops)
        elif isinstance(node, ast.Subscript):
            ops.append("Subscript")
    return sorted(ops)


def _tokens(text: str) -> list[str]:
    try:
        return [t.string for t in tokenize.generate_tokens(io.StringIO(text).readline)
                if t.type not in (tokenize.NL, tokenize.NEWLINE, tokenize.INDENT, tokenize.DEDENT, tokenize.ENDMARKER)]
    except (tokenize.TokenError, SyntaxError):
        return _TOKEN.findall(text)


def near_duplicates(sources: dict[str, str], threshold: float = DEFAULT_SIMILARITY) -> list[tuple[str, str, str, str, str]]:
    """(a, b, kind, severity, detail) for each pair of similar problems:
    - duplicate: the same normalized code;
    - near-duplicate: the same normalized code up to numeric constants, or the same operations
      and a computation (inputs aside, constants masked) at least `threshold` similar."""
    forms = {}
    for path, source in sources.items():
        exact, masked = normalized(source), normalized(source, constants=False)
        if exact is not None and masked is not None:
            comp = computation(masked)
            forms[path] = (ast.unparse(exact), ast.unparse(masked), _tokens(ast.unparse(comp)), operations(comp))
    pairs = []
    for a, b in itertools.combinations(sorted(forms), 2):
        (ea, ma, ta, oa), (eb, mb, tb, ob) = forms[a], forms[b]
        if ea == eb:
            pairs.append((a, b, "duplicate", "error", "the same code (up to names, comments and docstrings)"))
        elif ma == mb:
            pairs.append((a, b, "near-duplicate", "warning", "the same code up to numeric constants (sizes, parameters)"))
        elif oa == ob:
            matcher = difflib.SequenceMatcher(None, ta, tb, autojunk=False)
            if matcher.real_quick_ratio() >= threshold and matcher.quick_ratio() >= threshold:
                ratio = matcher.ratio()
                if ratio >= threshold:
                    pairs.append((a, b, "near-duplicate", "warning", f"the same operations, {ratio:.0%} similar code"))
    return pairs
