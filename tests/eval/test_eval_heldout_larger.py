"""The larger held-out variant (tools/worker/variants.py, tools/worker/variant_bytes.py): besides
the smaller one, every module-level size grown to a larger odd value, held out only where memory
allows. A kernel with a tile or grid baked to the problem's size, its tail masked, passes every
smaller variant (the mask hides the difference) and fails the larger one, naming the sizes; an
honest kernel passes both; a problem whose larger variant would take too much memory records it
as not used, with why; a problem that declares its variants keeps exactly those."""
from __future__ import annotations

import pytest
import torch
import torch.nn as nn

from helpers_eval import assert_ok, assert_verdict, describe, evaluator, failed, source
from tools import Verdict
from tools.worker import variant_bytes

SMALLER = "batch_size=9, dim=129, float constructor arguments x0.75"
LARGER = "batch_size=21, dim=321"  # (16 + 4) | 1, (256 + 64) | 1


@pytest.fixture(scope="module")
def cache_dir(tmp_path_factory):
    return tmp_path_factory.mktemp("ratchet-cache")


@pytest.fixture(scope="module")
def rows(cache_dir):
    with evaluator("scaled_rows", cache_dir) as ev:
        yield ev


def test_the_larger_variant_grows_every_size_to_a_larger_odd_value_within_the_bound(rows):
    assert [(v["describe"], v["larger"]) for v in rows.problem.variants] == [(SMALLER, False), (LARGER, True)]
    assert rows.problem.variants_dropped == []
    larger = rows.problem.variants[1]
    assert larger["input_bytes"] == larger["output_bytes"] == 21 * 321 * 4  # what the reference took on it


@pytest.mark.parametrize("name, first_unwritten", [("rows_tile_baked", "[0, 256]"), ("rows_grid_baked", "[16, 0]")])
def test_a_tile_or_grid_baked_to_the_problems_size_passes_the_smaller_variant_and_fails_the_larger(
        rows, name, first_unwritten):
    result = rows.evaluate(source(name))
    assert_verdict(result, Verdict.INCORRECT, "heldout-1:nan-pattern", f"held-out sizes ({LARGER}; inputs (21, 321))",
                   f"output at {first_unwritten}")
    assert result.trials == 5 and result.generalizes is None, describe(result)  # right on the problem's own inputs
    assert [(h["variant"], h["outcome"]) for h in result.heldout] == [(SMALLER, "ok"), (LARGER, "failed")]
    assert [n for n in failed(result) if n.startswith("heldout")] == ["heldout-1:nan-pattern"]


def test_an_honest_general_kernel_passes_the_larger_variant_too(rows):
    result = rows.evaluate(source("rows_general_ok"))
    assert_ok(result)
    assert result.generalizes is True
    assert result.heldout[1] == {"variant": LARGER, "outcome": "ok", "detail": "inputs (21, 321)"}


def test_a_larger_variant_over_the_memory_bound_is_recorded_as_not_used_with_why(cache_dir):
    """A (dim, dim, dim) input: dim 16 -> 21 takes 2.26x the problem's memory, over the 2x a
    larger variant may take (judged on the meta device, before anything is allocated)."""
    with evaluator("cube_rows", cache_dir) as ev:
        assert [v["describe"] for v in ev.problem.variants] == ["dim=9"]
        result = ev.evaluate(source("fixed_ok"))
    assert_ok(result)
    assert result.generalizes is True
    assert result.heldout == [
        {"variant": "dim=21", "outcome": "not used",
         "detail": "its inputs, outputs and parameters would take 72.4 KiB, 2.26x the problem's 32.0 KiB "
                   "(a larger variant may take at most 2x)"},
        {"variant": "dim=9", "outcome": "ok", "detail": "inputs (9, 9, 9)"}]


def test_the_bound_is_judged_on_shapes_alone_and_caps_any_problem():
    """A multi-GB problem is never built at larger sizes: its footprint comes from the meta
    device (nothing allocated), and the fixed cap refuses it even within twice its own size."""
    huge = variant_bytes.estimate(lambda: [1 << 15, 1 << 15], lambda: [torch.randn(1 << 16, 1 << 15, device="meta")], nn.Linear)
    assert huge == variant_bytes.Footprint(inputs=8 << 30, outputs=8 << 30, params=(4 << 30) + (128 << 10))
    why = variant_bytes.over_bound(huge.total, own=huge.total)
    assert why == ("its inputs, outputs and parameters would take 20.0 GiB, over the cap of 256.0 MiB "
                   "for a larger variant")
    assert variant_bytes.over_bound(200 << 20, own=100 << 20) is None
    assert "2.01x" in variant_bytes.over_bound((201 << 20), own=100 << 20)


def test_a_problem_that_declares_its_variants_keeps_exactly_those(cache_dir):
    with evaluator("declared_rows", cache_dir) as ev:
        assert [(v["describe"], v["origin"], v["larger"]) for v in ev.problem.variants] == [
            ("batch_size=3", "declared", False)]
        assert ev.problem.variants_dropped == []
