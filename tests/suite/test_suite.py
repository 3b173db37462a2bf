"""The bundled suite (suite/*.py) and the evaluator agree: every problem loads, and its
known-correct Triton candidate (tests/suite_candidates/<same name>.py) evaluates `ok`.

On the CPU (CI): small shapes (SUITE_SCALE=small, read by each problem file at import, in the
evaluator's workers too), Triton's interpreter, 2 trials, no timing. On a GPU (`-m gpu`): the
realistic shapes on cuda:0, 5 trials.
"""
from __future__ import annotations

import ast
import os
from pathlib import Path

import pytest

from tools import EvalOptions, Evaluator, Verdict
from tools.processes.warm import WarmPool

ROOT = Path(__file__).resolve().parents[2]
SUITE = ROOT / "suite"
CANDIDATES = Path(__file__).resolve().parents[1] / "suite_candidates"
PROBLEMS = sorted(p.stem for p in SUITE.glob("[0-9]*.py"))
# what the issue asks the suite to cover, by file: each category needs at least one problem
CATEGORIES = {
    "elementwise": ("01_", "02_", "03_", "04_"),
    "reduction": ("05_", "06_", "07_"),
    "norm": ("08_", "09_", "10_"),
    "softmax-like": ("11_", "12_", "13_"),
    "matmul epilogue": ("14_", "15_", "16_"),
    "conv with a fused tail": ("17_", "18_"),
    "attention": ("19_", "20_"),
    "loss with integer targets": ("21_",),
    "MLP block": ("22_", "23_"),
    "hard to beat": ("24_", "25_", "26_"),
}


def describe(result) -> str:
    failed = [c.name for c in result.checks if not c.passed]
    return f"{result.verdict.value}: {result.message} | failed checks: {failed}"


def test_suite_shape():
    assert len(PROBLEMS) >= 24
    assert sorted(p.stem for p in CANDIDATES.glob("[0-9]*.py")) == PROBLEMS, "one candidate per problem"
    for category, prefixes in CATEGORIES.items():
        assert any(name.startswith(prefixes) for name in PROBLEMS), f"no {category} problem"
    for name in PROBLEMS:
        tree = ast.parse((SUITE / f"{name}.py").read_text())
        assert ast.get_docstring(tree), f"{name}: no docstring"
        defined = {n.name for n in tree.body if isinstance(n, (ast.FunctionDef, ast.ClassDef))}
        assert {"Model", "get_inputs", "get_init_inputs"} <= defined, name
        assert "SUITE_SCALE" in (SUITE / f"{name}.py").read_text(), f"{name}: does not scale down"


@pytest.fixture(scope="module")
def small_scale():
    old = os.environ.get("SUITE_SCALE")
    os.environ["SUITE_SCALE"] = "small"  # the evaluator's workers inherit it
    yield
    if old is None:
        os.environ.pop("SUITE_SCALE", None)
    else:
        os.environ["SUITE_SCALE"] = old


@pytest.mark.timeout(600)
def test_every_candidate_is_ok_on_the_cpu(small_scale, tmp_path):
    """One test over the whole suite, so the evaluator's cache and imports are shared, and one warm
    pool (tools/processes/warm.py, as a Ray batch slot keeps), so the next problem's workers start while this
    one is evaluated (about half the wall time on two cores); the failures of all problems are
    reported together."""
    failures = []
    options = EvalOptions(device="cpu", trials=2, timing=False, warm=True, cache_dir=tmp_path / "cache",
                          start_timeout=120.0, build_timeout=120.0, trial_timeout=60.0)
    with WarmPool(options) as pool:
        for name in PROBLEMS:
            try:
                with Evaluator(SUITE / f"{name}.py", options, pool=pool) as evaluator:
                    result = evaluator.evaluate((CANDIDATES / f"{name}.py").read_text())
            except Exception as exc:  # noqa: BLE001 - a problem the evaluator cannot load: report it with the rest
                failures.append(f"{name}: the problem did not load: {exc}")
                continue
            if result.verdict is not Verdict.OK or result.trials != 2:
                failures.append(f"{name}: {describe(result)}")
    assert not failures, "\n".join(failures)


@pytest.mark.gpu
@pytest.mark.timeout(3600)
@pytest.mark.parametrize("name", PROBLEMS)
def test_candidate_is_ok_on_the_gpu(name, tmp_path, monkeypatch):
    monkeypatch.delenv("SUITE_SCALE", raising=False)  # realistic sizes
    options = EvalOptions(device="cuda:0", trials=5, timing=False, cache_dir=tmp_path / "cache")
    with Evaluator(SUITE / f"{name}.py", options) as evaluator:
        result = evaluator.evaluate((CANDIDATES / f"{name}.py").read_text())
    assert result.verdict is Verdict.OK and result.trials == 5, describe(result)
