"""The evaluation fails closed (tools/pipeline.py, tools/judge/verdict.py): a result is an evaluator
fault until decide() has seen every listed step clear; a step left out of the list, a step that
raises and a step that answers anything but a Failure or nothing are never `ok`."""
from __future__ import annotations

import pytest
from helpers_eval import describe, evaluator, source

from tools import pipeline
from tools.judge.evaluation import Evaluation
from tools.judge.verdict import Failure, decide, pending
from tools.record import Verdict


@pytest.fixture(scope="module")
def ev(tmp_path_factory):
    with evaluator("elementwise", tmp_path_factory.mktemp("cache"), trials=2) as e:
        yield e


def attempt(e, name: str) -> Evaluation:
    return Evaluation(source(name), e._new_result(source(name)))


def test_a_result_is_born_an_evaluator_fault():
    result = pending("class ModelNew: pass")
    assert result.verdict is Verdict.ERROR and not result.ok


@pytest.mark.parametrize("missing", pipeline.REQUIRED)
def test_ok_needs_every_listed_step_cleared(missing):
    result = pending("x")
    decide(result, None, [s for s in pipeline.REQUIRED if s != missing], pipeline.REQUIRED)
    assert result.verdict is Verdict.ERROR and missing in result.message, describe(result)
    everything = decide(pending("x"), None, pipeline.REQUIRED, pipeline.REQUIRED)
    assert everything.verdict is Verdict.OK, describe(everything)


def test_nothing_listed_is_never_ok():
    assert decide(pending("x"), None, [], []).verdict is Verdict.ERROR


def test_a_failure_decides_and_is_never_ok():
    failed = decide(pending("x"), Failure(Verdict.OK, "made-up", "a failure that claims ok"), pipeline.REQUIRED,
                    pipeline.REQUIRED)
    assert failed.verdict is Verdict.REJECTED and not failed.ok
    assert [(c.name, c.passed) for c in failed.checks] == [("made-up", False)]


def run(e, steps=pipeline.STEPS) -> Verdict | str:
    """The verdict of the honest kernel under `steps`, or the exception a step raised (which
    Evaluator.evaluate records as its own fault); the used worker is disposed of as evaluate() does."""
    evaluation = attempt(e, "elementwise_ok")
    try:
        result = pipeline.run(e.bench, evaluation, steps)
    except Exception as exc:  # noqa: BLE001 - the test reports which
        assert evaluation.result.verdict is Verdict.ERROR  # still pending: never ok
        return type(exc).__name__
    finally:
        e._dispose(evaluation)
    return result.verdict if result.verdict is not Verdict.ERROR else f"error: {result.message}"


def test_the_whole_list_accepts_an_honest_kernel(ev):
    evaluation = attempt(ev, "elementwise_ok")
    try:
        result = pipeline.run(ev.bench, evaluation)
        assert result.verdict is Verdict.OK and result.ok and result.trials == 2, describe(result)
    finally:
        ev._dispose(evaluation)


@pytest.mark.parametrize("removed", ["static", "trials", "heldout", "integrity", "blocks"])
def test_a_list_with_a_step_removed_is_not_ok(ev, removed):
    """A test double of the list, one step short (as a new code path that forgot one would be):
    the honest kernel that the whole list accepts is not ok: a later step fails for want of what
    the missing one found, raises, or, when nothing else notices, decide() names the missing step."""
    outcome = run(ev, [s for s in pipeline.STEPS if s.name != removed])
    assert outcome is not Verdict.OK
    if removed in ("heldout", "integrity", "blocks"):  # nothing later depends on them
        assert outcome == f"error: ratchet's evaluator failed (the steps {removed} did not clear); " \
                          "this says nothing about the candidate: evaluate it again", outcome


def test_a_step_that_raises_propagates(ev):
    def broken(bench, evaluation):
        raise RuntimeError("a bug of ratchet's")

    assert run(ev, (*pipeline.STEPS[:3], pipeline.Step("broken", broken))) == "RuntimeError"


def test_a_step_answering_neither_failure_nor_nothing_is_a_fault(ev):
    assert run(ev, (*pipeline.STEPS[:3], pipeline.Step("wrong", lambda bench, evaluation: True))) == "TypeError"
