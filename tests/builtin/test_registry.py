"""The built-in policy as a registry of families (agent/builtin/registry.py): every plan kind has
one, a kind's dispatch is the registry's alone, and no module of agent/builtin/ imports another in
a circle (imports inside functions count; those under `if TYPE_CHECKING:` never run and do not)."""
from __future__ import annotations

import ast
from pathlib import Path

import agent.builtin  # noqa: F401 - imports the families, which register themselves
from agent.builtin import registry
from helpers_imports import strongly_connected  # the finder tests/test_layers.py checks on a made-up circle

PACKAGE = Path(__file__).resolve().parents[2] / "agent" / "builtin"
KINDS = {"pointwise", "rowwise", "colwise", "matmul", "gemv", "mm_reduce", "twolevel", "pool", "scan", "argreduce",
         "conv", "conv_reduce", "attention", "batchnorm", "cross_entropy", "fallback"}


def _type_checking_block(node: ast.AST) -> bool:
    return isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test)


def imports_of(path: Path, modules: set[str]) -> set[str]:
    """The modules of agent/builtin/ that `path` imports at run time (module level or in a function)."""
    found: set[str] = set()

    def visit(node: ast.AST) -> None:
        if _type_checking_block(node):
            return
        if isinstance(node, ast.ImportFrom) and node.module:
            parts = node.module.split(".")
            if parts[:2] == ["agent", "builtin"]:
                if len(parts) == 3:
                    found.add(parts[2])
                elif len(parts) == 2:
                    found.update(a.name for a in node.names if a.name in modules)
        elif isinstance(node, ast.Import):
            found.update(a.name.split(".")[2] for a in node.names if a.name.startswith("agent.builtin."))
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(ast.parse(path.read_text()))
    return found & modules


def test_no_module_of_the_policy_imports_in_a_circle():
    modules = {p.stem for p in PACKAGE.glob("*.py") if p.stem != "__init__"}
    graph = {m: imports_of(PACKAGE / f"{m}.py", modules) for m in modules}
    assert graph["conv_reduce"] >= {"conv", "classify", "registry"}  # the walk sees imports (a sanity check)
    assert not strongly_connected(graph), strongly_connected(graph)


def test_every_plan_kind_is_a_registered_family_and_only_the_registry_dispatches_on_kinds():
    assert set(registry.kinds()) == KINDS
    claimed = [(f.kind, f.claims) for f in sorted((registry.family(k) for k in KINDS), key=lambda f: f.rank)
               if f.claims]
    assert claimed == [("batchnorm", ("bnstats",)), ("conv", ("conv",)), ("pool", ("pool",)), ("scan", ("scan",)),
                       ("argreduce", ("argreduce",))]  # a batch norm's before the convolution it follows
    for name in ("codegen.py", "search.py", "classify.py"):  # no table of kinds outside the registry
        text = (PACKAGE / name).read_text()
        assert not any(f'"{kind}": ' in text for kind in KINDS), name
