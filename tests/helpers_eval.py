"""Shared pieces of the evaluator's tests (tests/eval/test_eval_*.py): where the problem and candidate
files are, CPU options at test sizes, and assertions on a result record.

Everything runs on the CPU: Triton kernels under TRITON_INTERPRET=1 (the worker sets it for
device "cpu"), problems of a few thousand elements, one Evaluator per problem shared by a test
module (each evaluate() call still gets a fresh worker process).
"""
from __future__ import annotations

import json
from pathlib import Path

from tools import EvalOptions, Evaluator, Result, Verdict

HERE = Path(__file__).resolve().parent
PROBLEMS = HERE / "problems"
BAD_PROBLEMS = PROBLEMS / "bad"
CANDIDATES = HERE / "candidates"

# Guard rules switched off to show the run-time line (sandbox, tripwires, correctness) catching
# what the static guard would have caught first.
SECOND_LINE = frozenset({"import", "threads-processes", "dynamic-code", "patching", "file-io", "exit",
                         "precision-flags", "tensor-subclass"})


def options(cache_dir: Path, **overrides) -> EvalOptions:
    values = dict(device="cpu", trials=5, timing=False, trial_timeout=30.0, start_timeout=120.0,
                  build_timeout=120.0, cache_dir=cache_dir)
    values.update(overrides)
    return EvalOptions(**values)


def evaluator(problem: str, cache_dir: Path, entry: str = "Model", **overrides) -> Evaluator:
    return Evaluator(PROBLEMS / f"{problem}.py", options(cache_dir, **overrides), entry=entry)


def evaluate(problem: str, cache_dir: Path, *sources: str, **overrides) -> list[Result]:
    """Each source's result from one evaluator of `problem` (options(cache_dir, **overrides)), closed after."""
    with evaluator(problem, cache_dir, **overrides) as ev:
        return [ev.evaluate(text) for text in sources]


def source(name: str) -> str:
    return (CANDIDATES / f"{name}.py").read_text()


def line_of(name: str, text: str) -> int:
    """The 1-based line of the first line of candidate `name` containing `text`."""
    for number, line in enumerate(source(name).splitlines(), 1):
        if text in line:
            return number
    raise AssertionError(f"{text!r} is not in {name}.py")


def failed(result: Result) -> list[str]:
    return [c.name for c in result.checks if not c.passed]


def describe(result: Result) -> str:
    """For assertion messages: the verdict, the message and the failed checks."""
    return f"{result.verdict.value}: {result.message} | failed checks: {failed(result)}"


def assert_ok(result: Result) -> None:
    assert result.verdict is Verdict.OK, describe(result)
    assert result.trials == 5, describe(result)
    assert not failed(result), describe(result)
    assert result.kernel_launches >= 1
    json.dumps(result.to_dict())  # the record stays JSON-serializable


def assert_verdict(result: Result, verdict: Verdict, check: str, *fragments: str) -> None:
    """The verdict, a failed check named `check` (or ending in `:check`), and each fragment in
    the message the model sees."""
    assert result.verdict is verdict, describe(result)
    names = failed(result)
    assert any(n == check or n.endswith(f":{check}") for n in names), describe(result)
    for fragment in fragments:
        assert fragment in result.message, describe(result)
