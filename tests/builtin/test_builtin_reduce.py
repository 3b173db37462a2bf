"""Reductions of any length and over everything, losses and norms (agent.builtin.split, twolevel,
fused, losses, norms): each problem recognized and its draft correct in Triton's interpreter, each
kernel variant (split passes and their partial kinds, two levels, fused loops, int64 offsets),
determinism, the search spaces, and what is declined."""
from __future__ import annotations

import itertools
from pathlib import Path

import pytest
import torch

from agent.builtin import codegen, configs, search
from agent.builtin.recognize import recognize
from tools.guard import scan as guard
from helpers_builtin import declined, draft_outputs, load_module

HERE = Path(__file__).parents[1]
PROBLEMS = HERE / "builtin_problems"
pytestmark = pytest.mark.timeout(180)
_LOADED = itertools.count()

# problem -> (template, a word of the summary, whether the first configuration splits rows across programs)
RECOGNIZED = {
    "layernorm_long.py": ("rowwise", "layer_norm", True),
    "long_softmax.py": ("rowwise", "softmax", True),
    "mse_loss.py": ("rowwise", "dims [0, 1]", True),
    "frobenius_norm.py": ("rowwise", "norm", True),
    "huber_loss.py": ("rowwise", "loss", False),
    "smooth_l1_loss.py": ("rowwise", "loss", False),
    "hinge_loss.py": ("rowwise", "dims [0, 1]", False),
    "kl_div.py": ("rowwise", "dims [0, 1]", False),
    "cosine_loss.py": ("twolevel", "then over all 24 row results", False),
    "triplet_loss.py": ("twolevel", "then over all 24 row results", False),
    "group_norm.py": ("rowwise", "group_norm", False),
    "instance_norm.py": ("rowwise", "instance_norm", False),
    "batch_norm_eval.py": ("pointwise", "rsqrt", False),
}


@pytest.fixture(autouse=True)
def interpreter(monkeypatch):
    monkeypatch.setenv("TRITON_INTERPRET", "1")


def _check(problem: Path, source: str, tmp_path: Path, tol: float = 1e-4) -> torch.Tensor:
    expected, got = draft_outputs(problem, source, tmp_path)
    assert type(got) is torch.Tensor and got.shape == expected.shape and got.dtype == expected.dtype
    torch.testing.assert_close(got, expected, rtol=tol, atol=tol)
    return got


def _problem(tmp_path: Path, name: str, forward: str, inputs: str, init: str = "[]", ctor: str = "",
             body: str = "") -> Path:
    """A small problem file written for one test."""
    path = tmp_path / f"{name}.py"
    path.write_text(f'''import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self{ctor}):
        super().__init__()
{body}

    def forward(self, x):
        return {forward}


def get_inputs():
    return {inputs}


def get_init_inputs():
    return {init}
''')
    return path


def _draft(problem: Path, config: dict | None = None) -> tuple[str, object]:
    rec = recognize(problem)
    assert rec.plan is not None, rec.reason
    return codegen.draft(rec.plan, rec.problem, config or search.space(rec.plan)[0]), rec.plan


@pytest.mark.parametrize("name", sorted(RECOGNIZED))
def test_each_loss_and_norm_is_recognized_and_its_draft_is_correct(name, tmp_path):
    template, word, split = RECOGNIZED[name]
    source, plan = _draft(PROBLEMS / name)
    assert plan.kind == template and word in plan.summary, plan.summary
    assert bool(search.space(plan)[0].get("split")) == split
    assert guard.check(source).violations == []
    got = _check(PROBLEMS / name, source, tmp_path)
    if template == "twolevel" or "loss" in name or name == "kl_div.py":
        assert got.dim() == 0  # a 0-d tensor, as the reference's


# --- split reductions ------------------------------------------------------------------------------


def test_a_split_reduction_is_two_launches_and_its_combine_loops_over_many_partials(tmp_path):
    """The mean over every element: partial sums of chunks, then one program combining them; with
    small tiles and many programs the combine loops over the partials BLOCK_S at a time."""
    problem = PROBLEMS / "mse_loss.py"
    config = {"split": True, "BLOCK_R": 128, "programs": 600, "num_warps": 4}
    source, _ = _draft(problem, config)
    assert source.count("@triton.jit") == 2 and "split_finish_kernel[(n_rows,)]" in source
    assert "tl.atomic" not in source
    first = _check(problem, source, tmp_path)
    again = draft_outputs(problem, source, tmp_path)[1]
    assert torch.equal(first, again)  # a fixed order: the same bits every run


def test_layer_norm_over_long_rows_is_one_pass_for_its_moments_then_one_to_apply(tmp_path):
    """Mean and variance come from one pass (Welford per lane, programs combined with Chan's
    formula), accurate even far from zero; the last pass normalizes each program's chunk."""
    problem = _problem(tmp_path, "offset_ln", "F.layer_norm(x, (8, 64, 64))",
                       "[torch.randn(2, 8, 64, 64) * 0.01 + 1000.0]")
    source, plan = _draft(problem)
    assert search.space(plan)[0]["split"]
    assert source.count("@triton.jit") == 2 and "split_apply_kernel" in source and "meanacc" in source
    expected, got = draft_outputs(problem, source, tmp_path)
    torch.testing.assert_close(got, expected, rtol=1e-2, atol=1e-2)  # the input's own rounding: 3e-3 from exact


@pytest.mark.parametrize("forward, kernels", [
    ("torch.softmax(x, dim=-1)", 2),  # online softmax partials (max, sum), then the apply pass
    ("torch.logsumexp(x, dim=-1)", 2),  # the same partials, one value per row
    ("torch.amax(x, dim=-1) - torch.amin(x, dim=-1)", 2),  # max and min partials in one pass
    ("x - x.mean(dim=-1, keepdim=True) * x.abs().amax(dim=-1, keepdim=True)", 2),
    ("x / x.abs().sum(dim=-1, keepdim=True).clamp_min(1.0).sqrt().sum()", None),  # declined below
], ids=["softmax", "logsumexp", "max_min", "mean_max", "two_levels_of_rows"])
def test_each_kind_of_partial_combines_correctly(forward, kernels, tmp_path):
    problem = _problem(tmp_path, "long_rows", forward, "[torch.randn(3, 40000) * 3.0]")
    rec = recognize(problem)
    if kernels is None:
        assert "a global reduction of row results feeding more than a scalar" in declined(rec)  # the fallback's
        return
    assert search.space(rec.plan)[0]["split"]
    for config in search.space(rec.plan)[:2]:
        source = codegen.draft(rec.plan, rec.problem, config)
        assert source.count("@triton.jit") == kernels
        _check(problem, source, tmp_path)


def test_dependent_reductions_take_one_pass_per_level(tmp_path):
    """A max feeding a sum that is no softmax: the sum's pass combines the max's partials first."""
    problem = _problem(tmp_path, "levels",
                       "torch.sum(torch.relu(x - torch.amax(x, dim=-1, keepdim=True) + 1.0), dim=-1)",
                       "[torch.randn(2, 40000)]")
    source, _ = _draft(problem)
    assert source.count("@triton.jit") == 3  # max partials, sum partials, finish
    _check(problem, source, tmp_path)


def test_int64_offsets(monkeypatch, tmp_path):
    """Sizes past int32 index in int64 (the kernels cannot run at such sizes here, so the flag is forced)."""
    import agent.builtin.general as general

    monkeypatch.setattr(general, "needs_int64", lambda plan: True)
    for name in ("frobenius_norm.py", "cosine_loss.py"):
        source, _ = _draft(PROBLEMS / name)
        assert ".to(tl.int64)" in source
        _check(PROBLEMS / name, source, tmp_path)


# --- two levels, fused loops -----------------------------------------------------------------------


def test_two_levels_with_looped_rows(tmp_path):
    problem = _problem(tmp_path, "wide_cosine", "torch.mean(1 - F.cosine_similarity(x, x.abs() + 0.5, dim=1))",
                       "[torch.randn(5, 1500)]")
    rec = recognize(problem)
    assert rec.plan is not None and rec.plan.kind == "twolevel", rec.reason
    looped = [c for c in search.space(rec.plan) if c["looped"]]
    assert looped and not any(c.get("split") for c in search.space(rec.plan))
    source = codegen.draft(rec.plan, rec.problem, looped[0])
    assert "all_finish_kernel[(1,)]" in source
    # the norms are factored out of the dot product's sum: one loop reads each row once for all three
    assert source.count("for r0 in range") == 1
    _check(problem, source, tmp_path)


def test_ready_reductions_share_one_loop(tmp_path):
    """An L1 sum and an L2 sum of the same rows are read in one loop, then the output in another."""
    problem = _problem(tmp_path, "l1_l2", "x / (x.abs().sum(dim=1, keepdim=True) + x.norm(dim=1, keepdim=True))",
                       "[torch.randn(6, 3000)]")
    rec = recognize(problem)
    config = next(c for c in search.space(rec.plan) if c.get("looped"))
    source = codegen.draft(rec.plan, rec.problem, config)
    assert source.count("for r0 in range") == 2
    _check(problem, source, tmp_path)


# --- the search spaces ------------------------------------------------------------------------------


def test_split_configurations_come_from_the_shapes_and_the_sm_count():
    plan = recognize(PROBLEMS / "layernorm_long.py").plan
    space = search.space(plan)
    assert all(c.get("split") for c in space)  # 2 rows of 32768: one program per row is declined
    assert {c["programs"] % configs.SMS for c in space} == {0}
    assert len({configs.key(c) for c in space}) == len(space)
    many = recognize(PROBLEMS / "row_sum.py").plan  # short rows: no split
    assert not any(c.get("split") for c in search.space(many))


# --- what is declined ------------------------------------------------------------------------------


def test_what_is_declined_says_which_op(tmp_path):
    # batch norm in training mode is agent.builtin.batchnorm's (tests/builtin/test_builtin_batchnorm.py); a
    # reduction after it is not
    rec = recognize(_problem(tmp_path, "bn_module", "self.bn(x).softmax(dim=1)", "[torch.randn(4, 3, 5, 5)]",
                             body="        self.bn = nn.BatchNorm2d(3)"))  # never put in eval(), as KernelBench's
    assert ("(a softmax after a batch norm in training mode (its kernels fuse elementwise work only))"
            in declined(rec)), declined(rec)  # library ops only: kept eager
    cases = {
        "reductions over different shapes or dimensions": ("x.sum(dim=1, keepdim=True) + x.sum(dim=0)",
                                                           "[torch.randn(6, 6)]"),
    }
    for words, (forward, inputs) in cases.items():
        rec = recognize(_problem(tmp_path, f"declined_{next(_LOADED)}", forward, inputs))
        assert words in declined(rec) and "\n" not in declined(rec), declined(rec)


def test_layer_norm_rows_stay_exact_at_other_sizes(tmp_path):
    """The split is computed in forward from the sizes: the draft takes other batches and widths."""
    source, _ = _draft(PROBLEMS / "layernorm_long.py")
    (tmp_path / "cand.py").write_text(source)
    cand = load_module(tmp_path / "cand.py")
    ref = load_module(PROBLEMS / "layernorm_long.py")
    for shape in ((3, 8, 64, 64), (1, 5, 33, 33)):  # the second narrower than a row worth splitting
        torch.manual_seed(3)
        reference = ref.Model(shape[1:])
        torch.manual_seed(3)
        ours = cand.ModelNew(shape[1:])
        x = torch.randn(shape)
        with torch.no_grad():
            torch.testing.assert_close(ours(x), reference(x), rtol=1e-4, atol=1e-4)
    with pytest.raises(ValueError, match=r"x has shape \(1, 5, 33, 47\); this drafted kernel handles \(1, 5, 33, 33\)"):
        cand.ModelNew((5, 33, 47))(torch.randn(1, 5, 33, 47))  # H and W are one size in the problem (64)
