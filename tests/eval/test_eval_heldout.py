"""The drop-in check (tools/judge/heldout.py, tools/worker/variants.py): besides the problem's own
inputs, one untimed trial at held-out sizes and constructor arguments derived from the problem.
A kernel with the benchmark's shapes or arguments baked in fails, naming the sizes; one that
declares itself specialized and refuses other inputs is accepted and recorded as not general;
a general kernel is accepted and recorded as general."""
from __future__ import annotations

import pytest

from helpers_eval import assert_ok, assert_verdict, describe, evaluator, failed, source
from tools import Verdict


@pytest.fixture(scope="module")
def cache_dir(tmp_path_factory):
    return tmp_path_factory.mktemp("ratchet-cache")


@pytest.fixture(scope="module")
def rows(cache_dir):
    with evaluator("scaled_rows", cache_dir) as ev:
        yield ev


HELD_OUT = "batch_size=9, dim=129, float constructor arguments x0.75"
LARGER = "batch_size=21, dim=321"  # the larger variant (tests/eval/test_eval_heldout_larger.py)


def test_held_out_sizes_are_smaller_odd_values_and_scaled_arguments(rows):
    assert [v["describe"] for v in rows.problem.variants] == [HELD_OUT, LARGER]
    assert rows.problem.variants_dropped == []


def test_a_general_kernel_is_accepted_and_recorded_as_general(rows):
    result = rows.evaluate(source("rows_general_ok"))
    assert_ok(result)
    assert result.generalizes is True, describe(result)
    assert result.heldout == [{"variant": HELD_OUT, "outcome": "ok", "detail": "inputs (9, 129)"},
                              {"variant": LARGER, "outcome": "ok", "detail": "inputs (21, 321)"}]
    assert {"heldout-0", "heldout-1"} <= {c.name for c in result.checks if c.passed}


def test_a_kernel_with_the_benchmarks_shapes_baked_in_fails_naming_the_sizes(rows):
    result = rows.evaluate(source("rows_baked"))
    assert_verdict(result, Verdict.INCORRECT, "heldout-0:shape", "held-out sizes (batch_size=9, dim=129", "inputs (9, 129)",
                   "# ratchet: specialized")
    assert result.trials == 5 and result.generalizes is None  # right on the problem's own inputs
    assert result.heldout[-1]["outcome"] == "failed"


def test_a_declared_specialization_that_refuses_is_accepted_as_not_general(rows):
    result = rows.evaluate(source("rows_specialized"))
    assert_ok(result)
    assert result.generalizes is False
    assert result.heldout[0]["outcome"] == "refused" and "specialized to scale 2.0" in result.heldout[0]["detail"]


def test_a_declared_specialization_that_computes_garbage_fails(rows):
    result = rows.evaluate(source("rows_specialized_wrong"))
    assert_verdict(result, Verdict.INCORRECT, "heldout-0:values", "returned a wrong result instead of refusing")


def test_an_undeclared_refusal_is_a_runtime_error_naming_the_sizes(rows):
    result = rows.evaluate(source("rows_undeclared_refusal"))
    assert_verdict(result, Verdict.RUNTIME_ERROR, "heldout-0", "only batches of 16, not 9", "inputs (9, 129)")
    assert failed(result) == ["heldout-0"]


def test_a_problem_may_declare_its_shapes_fixed(cache_dir):
    with evaluator("fixed_shapes", cache_dir) as ev:
        result = ev.evaluate(source("fixed_ok"))
    assert_ok(result)
    assert result.generalizes is None
    assert result.heldout == [{"variant": "any", "outcome": "not used",
                               "detail": "the problem declares its shapes fixed (RATCHET_VARIANTS = [])"}]


def test_a_variant_the_reference_refuses_falls_back_to_the_leading_size(cache_dir):
    """Halving heads and dim breaks dim % heads in the reference itself: that variant is dropped,
    with why, and the leading size alone is held out."""
    with evaluator("grouped_rows", cache_dir) as ev:
        assert [v["describe"] for v in ev.problem.variants] == ["batch_size=9"]
        dropped, *larger = ev.problem.variants_dropped
        assert dropped["variant"] == "batch_size=9, heads=5, dim=129" and "the reference fails on it" in dropped["why"]
        # every larger one breaks dim % heads, or the heads the forward reads from the module, too
        assert [d["variant"] for d in larger] == ["batch_size=21, heads=11, dim=321", "heads=11, dim=321", "dim=321"]
        assert all("the reference fails on it" in d["why"] for d in larger)


def test_ratchet_best_says_whether_the_kept_kernel_is_a_drop_in(tmp_path, capsys):
    """`ratchet best` writes the source and one line on stderr: general, specialized (declared,
    refusing other shapes), or not checked."""
    from agent.cli import main
    from agent.workspace.root import Workspace
    from helpers_workspace import timed, write_problem
    from helpers_workspace_checks import commit

    problem = write_problem(tmp_path / "problems" / "19_ReLU.py")
    ws = Workspace(tmp_path / "ws", lock_timeout=30)
    specialized = timed(Verdict.OK, 0.5, generalizes=False, heldout=[
        {"variant": HELD_OUT, "outcome": "refused", "detail": "ValueError: specialized to (16, 256)"}])
    general = timed(Verdict.OK, 0.4, generalizes=True, heldout=[{"variant": HELD_OUT, "outcome": "ok", "detail": ""}])
    notes = []
    for result in (specialized, general):
        with ws.open_problem(problem) as repo:
            commit(repo, result)
        assert main(["best", str(problem), "--workspace", str(ws.root)]) == 0
        captured = capsys.readouterr()
        assert "class ModelNew" in captured.out
        notes.append(captured.err.strip())
    assert notes[0] == ("attempt 1 is specialized to the problem's shapes and arguments (declared): it refuses others, "
                        f"e.g. {HELD_OUT}: ValueError: specialized to (16, 256)")
    assert notes[1] == f"attempt 2 is general: also right on held-out {HELD_OUT}"


def test_a_kernel_that_does_not_compile_for_held_out_sizes_is_a_compile_error_naming_them(rows):
    result = rows.evaluate(source("rows_pow2_only"))
    assert_verdict(result, Verdict.COMPILE_ERROR, "heldout-0", "held-out sizes (batch_size=9, dim=129", "power of 2")
    assert result.trials == 5


def test_a_forward_that_reads_the_module_sizes_has_no_variant_a_candidate_could_follow(cache_dir):
    """The reference is built and run as a candidate is, from the constructor's arguments and the
    inputs alone: a forward that reshapes to the module's batch_size cannot follow other sizes,
    so no variant is held out (and no honest kernel is failed for it), and the record says why."""
    with evaluator("reads_sizes", cache_dir) as ev:
        assert ev.problem.variants == []
        assert [d["variant"] for d in ev.problem.variants_dropped] == ["batch_size=9, dim=129", "batch_size=9",
                                                                     "batch_size=21, dim=321", "dim=321"]
        assert all("the reference fails on it" in d["why"] for d in ev.problem.variants_dropped)


def test_a_grid_planned_on_the_first_call_fails_through_the_same_instance(rows):
    """The larger variant keeps the constructor's arguments: it runs through the instance that ran
    the trials, whose grid was planned for the problem's 16 x 256 (a new instance would plan anew)."""
    result = rows.evaluate(source("rows_planned_first_call"))
    assert_verdict(result, Verdict.INCORRECT, "heldout-1:nan-pattern", f"held-out sizes ({LARGER}")
    assert result.heldout[0]["outcome"] == "ok"  # other arguments: a new instance, which planned for them


def test_an_exact_shape_kernel_with_a_torch_fallback_is_not_general(rows):
    result = rows.evaluate(source("rows_exact_fallback"))
    assert_ok(result)
    assert result.generalizes is False, describe(result)
    assert result.heldout[-1] == {"variant": "any", "outcome": "fallback", "detail":
                                  "left aten::relu to torch on held-out sizes that its own kernels computed "
                                  "on the problem's"}
