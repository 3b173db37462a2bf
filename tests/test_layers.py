"""The seams the layout promises, read from the code's imports (every import statement, those
inside functions included): tools/ never imports agent/, and the worker processes' package
(tools/worker/, next to untrusted candidates) imports nothing of the parent's judging code."""
from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# the trusted parent's code that decides or measures for a verdict; a worker process may run
# the shared plumbing (protocol, transport, memory sharing), measurement helpers and kernels
JUDGING = ("tools.judge.verdict", "tools.judge.trials", "tools.judge.trial_checks", "tools.judge.compare", "tools.timing.clocks", "tools.timing.blocks",
           "tools.evaluate", "tools.judge.heldout", "tools.guard.scan", "tools.guard.calls", "tools.guard.context",
           "tools.guard.names", "tools.judge.static", "tools.timing.stats", "tools.processes.replies", "tools.processes.process", "tools.processes.spawner",
           "tools.processes.feed", "tools.processes.reference", "tools.reward.kernel_reward", "tools.reward.score", "tools.reward.on_ray", "tools.processes.warm",
           "tools.processes.builds", "tools.processes.artifacts", "tools.sandbox")


def imported(path: Path) -> set[str]:
    """Every module name an import statement of `path` names (relative imports resolved)."""
    package = ".".join(path.relative_to(ROOT).with_suffix("").parts[:-1])
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parent = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(parent + ([base] if base else []))
            names.add(base)
            names.update(f"{base}.{alias.name}" for alias in node.names)
    return names


def test_tools_never_imports_agent():
    found = sorted(f"{p.relative_to(ROOT)}: {name}" for p in (ROOT / "tools").rglob("*.py")
                   for name in imported(p) if name == "agent" or name.startswith("agent."))
    assert not found, found


def test_the_worker_package_imports_none_of_the_parents_judging_code():
    found = sorted(f"{p.relative_to(ROOT)}: {name}" for p in (ROOT / "tools" / "worker").rglob("*.py")
                   for name in imported(p) if any(name == m or name.startswith(m + ".") for m in JUDGING))
    assert not found, found


def test_the_scan_sees_imports_inside_functions():
    """The scan itself: a nested import counts (a test that could not fail would prove nothing)."""
    probe = ROOT / "tools" / "worker" / "worker.py"
    assert "tools.worker.warmup" in imported(probe) and "tools.wire.transport" in imported(probe)
