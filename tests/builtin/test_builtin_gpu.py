"""The built-in policy's kernels on a GPU: every configuration it would try first is correct
under the evaluator (compiled Triton, both input distributions), for every recognized problem.

Run on the GPU machine: python -m pytest -m gpu tests/builtin/test_builtin_gpu.py
"""
from __future__ import annotations

from pathlib import Path

import pytest

from agent.builtin import codegen, search
from agent.builtin.recognize import recognize
from tools.evaluate import EvalOptions, Evaluator
from tools.record import Verdict

pytestmark = [pytest.mark.gpu, pytest.mark.timeout(900)]
HERE = Path(__file__).parents[1]
PROBLEMS = sorted(p for p in (HERE / "builtin_problems").glob("*.py") if p.stem != "sort_rows") + [
    HERE.parent / "examples" / "swish_problem.py", HERE / "problems" / "row_softmax.py",
    HERE / "problems" / "linear_relu.py", HERE / "problems" / "matmul.py",
]
CONFIGS_PER_PROBLEM = 3


@pytest.mark.parametrize("problem", PROBLEMS, ids=[p.stem for p in PROBLEMS])
def test_first_configurations_are_correct_on_the_gpu(problem):
    rec = recognize(problem)
    assert rec.plan is not None, rec.reason
    with Evaluator(problem, EvalOptions(device="cuda:0", timing=False)) as ev:
        for config in search.space(rec.plan)[:CONFIGS_PER_PROBLEM]:
            result = ev.evaluate(codegen.draft(rec.plan, rec.problem, config))
            assert result.verdict == Verdict.OK, f"{config}: {result.verdict.value}: {result.message}"
