"""The built-in policy's drafts import each module once, at the top (issue 16: "the generated
kernels repeat their imports"): every template it renders, on every bundled test problem and on
one whose prelude repeats, reorders and interleaves imports with definitions."""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

from agent.builtin import codegen, search
from agent.builtin.imports import hoist_imports
from agent.builtin.recognize import recognize

HERE = Path(__file__).parents[1]
PROBLEMS = sorted((HERE / "builtin_problems").glob("*.py"))
TEMPLATES = {"pointwise", "rowwise", "colwise", "matmul", "gemv", "mm_reduce", "twolevel", "pool", "scan", "argreduce",
             "attention", "conv", "conv_reduce", "batchnorm", "fallback"}
pytestmark = pytest.mark.timeout(120)

# A reference whose constructor needs module-level names, with an import after a definition,
# one repeated, and two on one line.
PRELUDE_PROBLEM = '''"""A bias and a scale from module-level constants."""
from __future__ import annotations

import math
import torch, math
import torch.nn as nn

SCALE = math.sqrt(2.0)
import torch.nn.functional as F
from torch import nn


def make_bias(channels):
    return torch.linspace(-1.0, 1.0, channels)


class Model(nn.Module):
    def __init__(self, channels: int):
        super().__init__()
        self.bias = nn.Parameter(make_bias(channels).reshape(channels, 1))
        self.scale = SCALE

    def forward(self, x):
        return F.relu(x + self.bias) * self.scale


def get_inputs():
    return [torch.randn(4, 16)]


def get_init_inputs():
    return [4]
'''


def top_imports(source: str) -> tuple[list[str], int]:
    """The module's top-level import statements as written, and how many statements precede the
    last of them that are not imports or the docstring."""
    body = ast.parse(source).body
    lines = [ast.get_source_segment(source, n) for n in body if isinstance(n, (ast.Import, ast.ImportFrom))]
    last = max(i for i, n in enumerate(body) if isinstance(n, (ast.Import, ast.ImportFrom)))
    before = [n for n in body[:last] if not isinstance(n, (ast.Import, ast.ImportFrom))
              and not (isinstance(n, ast.Expr) and isinstance(n.value, ast.Constant))]
    return lines, len(before)


def assert_imports_once_at_top(source: str) -> None:
    compile(source, "<draft>", "exec")
    lines, interleaved = top_imports(source)
    assert len(lines) == len(set(lines)), f"repeated imports: {lines}"
    assert interleaved == 0, "an import below a definition"
    names = [(alias.name, alias.asname) for line in lines for node in ast.parse(line).body
             if isinstance(node, ast.Import) for alias in node.names]
    assert len(names) == len(set(names))
    text_lines = [line for line in source.splitlines() if line.startswith(("import ", "from "))]
    assert len(text_lines) == len(set(text_lines))


def drafts(problem: Path, rec=None) -> tuple[str, list[str]]:
    rec = rec or recognize(problem)
    assert rec.plan is not None, rec.reason
    return rec.plan.kind, [codegen.draft(rec.plan, rec.problem, config) for config in search.space(rec.plan)[:3]]


def test_every_template_imports_each_module_once_at_the_top():
    rendered: set[str] = set()
    for problem in PROBLEMS:
        rec = recognize(problem)  # once: tracing a problem is most of this test's time
        if rec.plan is None:
            continue  # not a pattern the policy drafts (e.g. sort)
        kind, sources = drafts(problem, rec)
        rendered.add(kind)
        for source in sources:
            assert_imports_once_at_top(source)
            assert source.count("import torch\n") == 1 and source.count("import triton\n") == 1
    assert rendered == TEMPLATES  # each template was rendered at least once


def test_a_prelude_that_repeats_and_interleaves_imports(tmp_path):
    problem = tmp_path / "prelude_consts.py"
    problem.write_text(PRELUDE_PROBLEM)
    kind, sources = drafts(problem)
    assert kind == "pointwise"
    source = sources[0]
    assert_imports_once_at_top(source)
    lines, _ = top_imports(source)
    assert lines[0] == "from __future__ import annotations"
    assert lines.index("import math") < lines.index("import torch") < lines.index("import torch.nn.functional as F")
    # the definitions the constructor needs follow the imports, in their order
    assert source.index("import triton.language as tl") < source.index("SCALE = math.sqrt(2.0)") < \
        source.index("def make_bias") < source.index("class ModelNew")


def test_hoisting_keeps_what_it_cannot_move_safely():
    shared_line = '"""doc"""\nimport torch; x = 1\nimport torch\n'
    assert hoist_imports(shared_line) == shared_line  # moving the line would move `x = 1`
    assert hoist_imports("def f(:\n") == "def f(:\n"  # left for the evaluator to report
    nested = 'import os\n\n\ndef f():\n    import os\n    return os\n'
    assert hoist_imports(nested) == nested  # imports inside functions stay


def test_hoisting_only_squeezes_the_gaps_it_made():
    source = ('"""doc"""\nimport torch\n\n\nX = 1\n\n\n\nimport torch\n\n\nTEXT = """a\n\n\n\nb"""\n')
    out = hoist_imports(source)
    assert out == '"""doc"""\nimport torch\n\n\nX = 1\n\n\nTEXT = """a\n\n\n\nb"""\n'
    assert hoist_imports(out) == out
