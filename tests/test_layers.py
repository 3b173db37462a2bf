"""The seams the layout promises, read from the code's imports (every import statement, those
inside functions included): tools/ never imports agent/; each part of tools/ imports only the
parts it is allowed (an allowlist: the worker processes' package, next to untrusted candidates,
may import only the wire and itself); and no module of tools/ is part of an import circle."""
from __future__ import annotations

import ast
from pathlib import Path

from helpers_imports import strongly_connected

ROOT = Path(__file__).resolve().parents[1]
TOOLS = ROOT / "tools"
# a part of tools/ (a folder, or a module at its top) -> the other parts it may import at run time
# (imports under `if TYPE_CHECKING:` are for annotations only and are not layers). Read bottom-up:
# the worker and the wire know nothing of the parent; the judge knows the processes it reads, the
# timing knows the judge, the pipeline both, the evaluator the pipeline, the reward the evaluator.
ALLOWED: dict[str, set[str]] = {
    "wire": set(),  # frames, tensors and device memory between the parent and a worker
    "worker": {"wire"},  # runs next to candidates: its own code and the wire, nothing of the parent
    "zygote": {"worker", "wire"},  # what workers are forked from: what a worker holds, nothing more
    "sandbox": {"options"},  # its modes are the option's values
    "guard": set(),
    "record": set(),
    "env": set(),
    "options": {"env"},  # resolved(): the device, once
    "toolcalls": set(),
    "precision": {"worker"},  # the precisions' one table lives where they are applied
    "problem": {"guard"},
    "processes": {"wire", "sandbox", "env", "options", "problem", "record"},
    "judge": {"guard", "wire", "processes", "options", "problem", "record"},
    "timing": {"judge", "processes", "wire", "worker", "options", "record"},
    "pipeline": {"judge", "timing", "processes", "record"},
    "selfcheck": {"judge", "timing", "processes", "problem", "record"},  # the evaluator's own work, no candidate
    # hardware counters for the model (advice, no verdict): judge's first steps, a worker under ncu in its sandbox
    "counters": {"judge", "processes", "sandbox", "record"},
    "evaluate": {"pipeline", "judge", "timing", "processes", "options", "precision", "problem", "record", "env",
                 "selfcheck", "counters"},
    "reward": {"evaluate", "options", "precision", "problem", "record", "sandbox", "toolcalls", "env"},
    "__init__": {"record"},
}


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {module_name(p): p for p in TOOLS.rglob("*.py")}


def imported(path: Path, typing_too: bool = True) -> set[str]:
    """Every module name an import statement of `path` names (relative imports resolved); without
    `typing_too`, not those under `if TYPE_CHECKING:`."""
    tree = ast.parse(path.read_text())
    skipped: set[int] = set()
    if not typing_too:
        for node in ast.walk(tree):
            if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
                skipped.update(id(inner) for stmt in node.body for inner in ast.walk(stmt))
    package = ".".join(path.relative_to(ROOT).with_suffix("").parts[:-1])
    names: set[str] = set()
    for node in ast.walk(tree):
        if id(node) in skipped:
            continue
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parent = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(parent + ([base] if base else []))
            subs = {f"{base}.{alias.name}" for alias in node.names}
            names.update(subs)
            if not subs <= set(MODULES):  # a name from the module itself (not only its submodules)
                names.add(base)
    return names


def tools_modules(path: Path, typing_too: bool = True) -> set[str]:
    """The modules of tools/ that `path` imports (a name imported from a module counts as that module)."""
    found = set()
    for name in imported(path, typing_too):
        while name and name not in MODULES:
            name = name.rpartition(".")[0]
        if name and name != "tools":
            found.add(name)
    return found - {module_name(path)}


def part(module: str) -> str:
    """The part of tools/ a module belongs to: its folder, or its own name at the top."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def test_tools_never_imports_agent():
    found = sorted(f"{p.relative_to(ROOT)}: {name}" for p in TOOLS.rglob("*.py")
                   for name in imported(p) if name == "agent" or name.startswith("agent."))
    assert not found, found


def test_every_part_of_tools_imports_only_what_it_is_allowed():
    assert {part(m) for m in MODULES} == set(ALLOWED), "a part of tools/ with no line in ALLOWED"
    found = sorted(f"{path.relative_to(ROOT)}: {dep}" for name, path in MODULES.items()
                   for dep in tools_modules(path, typing_too=False)
                   if part(dep) != part(name) and part(dep) not in ALLOWED[part(name)])
    assert not found, found


def test_the_worker_package_imports_only_the_wire_and_itself():
    found = sorted(f"{p.relative_to(ROOT)}: {dep}" for p in (TOOLS / "worker").rglob("*.py")
                   for dep in tools_modules(p) if part(dep) not in ("worker", "wire"))
    assert not found, found


def test_no_module_of_tools_is_in_an_import_circle():
    graph = {name: tools_modules(path) for name, path in MODULES.items()}
    circles = strongly_connected(graph)
    assert not circles, circles


def test_the_scan_sees_imports_inside_functions():
    """The scan itself: a nested import counts (a test that could not fail would prove nothing)."""
    probe = TOOLS / "worker" / "worker.py"
    assert "tools.worker.warmup" in imported(probe) and "tools.wire.transport" in imported(probe)


def test_the_circle_finder_finds_a_circle():
    """The circle test could not fail if the finder saw none: a made-up graph with one circle."""
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a", "d"}, "d": set()}
    assert strongly_connected(graph) == [["a", "b", "c"]]
    assert strongly_connected({"a": {"b"}, "b": set()}) == []
