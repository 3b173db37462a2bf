"""The problem's constructor and forward signature, for ModelNew: the reference's own `__init__`
(the class renamed), the imports and module-level definitions it needs, the forward's parameters,
and an expression on `self` for each parameter and buffer."""
from __future__ import annotations

import ast
import inspect
from pathlib import Path

from agent.builtin.ir import Problem, Unrecognized


def describe(path: Path, entry: str, module, model, inputs) -> Problem:
    import torch.nn as nn

    source = path.read_text()
    tree = ast.parse(source)
    cls_node = next((n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == entry), None)
    if cls_node is None:
        raise Unrecognized(f"no class {entry} at the top level of {path.name}")
    cls = getattr(module, entry)
    if cls.__bases__ != (nn.Module,):
        raise Unrecognized(f"{entry} derives from {', '.join(b.__name__ for b in cls.__bases__)}, not nn.Module alone")
    init = next((n for n in cls_node.body if isinstance(n, ast.FunctionDef) and n.name == "__init__"), None)
    if init is None:
        init_source = "    def __init__(self):\n        super().__init__()\n"
        needed: set[str] = set()
    else:
        renamed = _Rename(entry).visit(ast.parse(ast.unparse(init)))
        ast.fix_missing_locations(renamed)
        init_source = _indent(ast.unparse(renamed), 4) + "\n"
        needed = {n.id for n in ast.walk(init) if isinstance(n, ast.Name)}
    prelude = _prelude(tree, needed, entry)
    signature = inspect.signature(cls.forward)
    params = list(signature.parameters.values())[1:]
    if any(p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD, p.KEYWORD_ONLY) for p in params):
        raise Unrecognized(f"{entry}.forward takes *args, **kwargs or keyword-only arguments")
    if len(params) < len(inputs) or any(p.default is p.empty for p in params[len(inputs):]):
        raise Unrecognized(f"{entry}.forward does not take get_inputs() positionally")
    forward_params = "".join(", " + str(p).split(":")[0].split("=")[0].strip() for p in params[:len(inputs)])
    input_names = [p.name for p in params[:len(inputs)]]
    state_names = [*dict(model.named_parameters()), *dict(model.named_buffers())]
    return Problem(path=path, entry=entry, source=source, init_source=init_source, prelude=prelude,
                   forward_params=forward_params, input_names=input_names,
                   param_exprs={name: _attr_expr(name) for name in state_names},
                   submodules={_attr_expr(name): (type(m).__name__, _plain_attributes(m))
                               for name, m in model.named_modules() if name})


def _plain_attributes(module) -> dict:
    """A module's public attributes that are plain data (ints, floats, bools, strings, None, tuples)."""
    def plain(v) -> bool:
        return v is None or type(v) in (int, float, bool, str) or (type(v) is tuple and all(plain(x) for x in v))

    return {k: v for k, v in vars(module).items() if not k.startswith("_") and plain(v)}


class _Rename(ast.NodeTransformer):
    def __init__(self, entry: str) -> None:
        self.entry = entry

    def visit_Name(self, node: ast.Name) -> ast.Name:
        if node.id == self.entry:
            return ast.copy_location(ast.Name(id="ModelNew", ctx=node.ctx), node)
        return node


def _indent(text: str, spaces: int) -> str:
    pad = " " * spaces
    return "\n".join(pad + line if line.strip() else line for line in text.splitlines())


def _prelude(tree: ast.Module, needed: set[str], entry: str) -> str:
    """Allowed imports of the reference and the module-level definitions __init__ uses (transitively)."""
    from tools.guard.scan import ALLOWED_IMPORTS

    defs: dict[str, ast.stmt] = {}
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.ClassDef)) and node.name not in (entry, "get_inputs", "get_init_inputs"):
            defs[node.name] = node
        elif isinstance(node, ast.Assign):
            for target in node.targets:
                for name in ast.walk(target):
                    if isinstance(name, ast.Name):
                        defs[name.id] = node
    keep: list[ast.stmt] = []
    todo = [n for n in needed if n in defs]
    seen: set[int] = set()
    while todo:
        stmt = defs[todo.pop()]
        if id(stmt) in seen:
            continue
        seen.add(id(stmt))
        keep.append(stmt)
        todo.extend(n.id for n in ast.walk(stmt) if isinstance(n, ast.Name) and n.id in defs)
    imports = [n for n in tree.body if isinstance(n, (ast.Import, ast.ImportFrom)) and not getattr(n, "level", 0)
               and all((a.name if isinstance(n, ast.Import) else (n.module or "")).split(".")[0] in ALLOWED_IMPORTS
                       for a in n.names)]
    order = {id(n): i for i, n in enumerate(tree.body)}
    lines = [ast.unparse(n) for n in imports]
    lines += [ast.unparse(n) for n in sorted(keep, key=lambda n: order[id(n)])]
    return "\n".join(lines)


def _attr_expr(name: str) -> str:
    expr = "self"
    for part in name.split("."):
        expr += f"[{part}]" if part.isdigit() else f".{part}"
    return expr
