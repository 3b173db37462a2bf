"""The built-in policy's fallback family (agent.builtin.fallback): a forward no family claims is
lowered op by op, its library ops called through torch and each stretch of elementwise work fused
into a kernel of its own. Each problem here is one no family claims (a sort; two matrix products; a
pooling after a convolution; a group norm with a number made a tensor in forward): drafted by the fallback, its kernels launched, correct beside the
reference at its sizes and at other sizes (held out: the same draft); one end to end through
`ratchet optimize` and `ratchet eval` (the evaluator's held-out variants included); a forward of
library ops only is kept eager with its reason; and what a family claims stays that family's."""
from __future__ import annotations

from pathlib import Path

import pytest
import torch

from agent.builtin import codegen, search
from agent.builtin.policy import BuiltinPolicy
from agent.builtin.recognize import recognize
from helpers_builtin import assert_draft_matches_at_two_sizes, builtin_cpu_env, draft_outputs, evaluates_ok, optimize_builtin

PROBLEMS = Path(__file__).parents[1] / "builtin_problems"
pytestmark = pytest.mark.timeout(240)

# problem -> (the families' reason, named in the summary; the library ops; the kernels; other sizes)
CASES = {
    "fallback_sort_scale.py": ("aten.sort.default has no built-in template", ["aten.sort"], 2,
                               {"batch_size": 3, "width": 17}),
    "fallback_two_linears.py": ("2 matrix products in one forward", ["aten.addmm"], 2,
                                {"batch_size": 5, "in_features": 9, "hidden": 11, "out_features": 7}),
    "fallback_conv_pool.py": ("a max_pool2d with the convolution", ["aten.convolution", "aten.max_pool2d_with_indices"],
                              2, {"batch_size": 3, "out_channels": 4, "height": 9, "width": 11}),
    # a number made a tensor on the input's device inside forward (KernelBench L2 83 and 93 were
    # unrecognized for it: traced on the meta device, its value was lost)
    "fallback_group_norm_floor.py": ("graph node get_attr _tensor_constant0", ["aten.native_group_norm"], 1,
                                     {"batch_size": 3, "channels": 12, "length": 10}),
    # a triangle of a product, written by position (KernelBench L1 14 and 15 were kept eager for it)
    "fallback_triu_product.py": ("aten.triu.default has no built-in template", ["aten.mm"], 1,
                                 {"rows": 9, "inner": 5, "cols": 13}),
}


@pytest.fixture(autouse=True)
def interpreter(monkeypatch):
    monkeypatch.setenv("TRITON_INTERPRET", "1")


@pytest.mark.parametrize("name", sorted(CASES))
def test_what_no_family_claims_is_drafted_op_by_op_and_correct_at_two_sizes(name, tmp_path):
    reason, library, kernels, other = CASES[name]
    rec = recognize(PROBLEMS / name)
    assert rec.plan is not None and rec.plan.kind == "fallback", rec.reason
    assert f"no family claims it ({reason}" in rec.plan.summary and all(op in rec.plan.summary for op in library)
    source = codegen.draft(rec.plan, rec.problem, search.space(rec.plan)[0])
    assert source.count("@triton.jit") == kernels and source.count("_kernel[(triton.cdiv(") == kernels
    assert_draft_matches_at_two_sizes(PROBLEMS / name, source, tmp_path, other, 1e-5)


def test_a_submodules_setting_the_draft_bakes_is_refused_not_miscomputed(tmp_path):
    """GroupNorm's num_groups reaches the fallback's torch call as traced: another value is refused
    with one line (it computed wrong outputs before)."""
    rec = recognize(PROBLEMS / "fallback_group_norm_floor.py")
    source = codegen.draft(rec.plan, rec.problem, search.space(rec.plan)[0])
    namespace: dict = {"__name__": "fallback_group_norm_floor_draft"}
    exec(compile(source, "draft.py", "exec"), namespace)  # noqa: S102 - the policy's own draft
    with pytest.raises(ValueError, match="self.norm.num_groups is 2; this drafted kernel computes with 3 only"):
        namespace["ModelNew"](6, 2, -0.5)(torch.randn(2, 6, 24))


def test_a_module_scalar_reaches_the_kernel_at_run_time(tmp_path):
    """The sort problem's scale is a kernel argument read from the module: another value, the same draft."""
    rec = recognize(PROBLEMS / "fallback_sort_scale.py")
    source = codegen.draft(rec.plan, rec.problem, search.space(rec.plan)[-1])
    assert "float(self.scale)" in source
    scaled = tmp_path / "fallback_sort_scale.py"
    scaled.write_text((PROBLEMS / "fallback_sort_scale.py").read_text().replace("[width, 1.5]", "[width, -0.75]"))
    expected, got = draft_outputs(scaled, source, tmp_path)
    torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-5)


def test_library_ops_alone_are_kept_eager_with_the_reason(tmp_path):
    """A flipped product has no elementwise work: a draft would only call torch, which the
    evaluator rejects, so nothing is attempted and the one line says the reference is kept."""
    problem = tmp_path / "flip_product.py"
    problem.write_text("import torch\nimport torch.nn as nn\n\n\nclass Model(nn.Module):\n"
                       "    def forward(self, a, b):\n        return torch.flip(a @ b, [0])\n\n\n"
                       "def get_inputs():\n    return [torch.randn(8, 8), torch.randn(8, 8)]\n\n\n"
                       "def get_init_inputs():\n    return []\n")
    rec = recognize(problem)
    assert rec.plan is None and rec.kept_eager, rec.reason
    assert "aten.flip outside a scan" in rec.reason and "aten.flip, aten.mm" in rec.reason
    policy = BuiltinPolicy(problem)
    line = policy.unrecognized
    assert policy.kept_eager and line is not None and line.startswith("flip_product.py: kept eager") and "\n" not in line


@pytest.mark.parametrize("op, diagonal", [("tril", 0), ("triu", -2), ("tril", 3)])
def test_a_triangle_keeps_its_diagonal_and_batches(op, diagonal, tmp_path):
    """tril and triu by position, any diagonal, over the last two dims of a batch."""
    problem = tmp_path / f"{op}_batched.py"
    problem.write_text("import torch\nimport torch.nn as nn\n\n\nclass Model(nn.Module):\n"
                       f"    def forward(self, a, b):\n        return torch.{op}(torch.bmm(a, b), {diagonal}) * 2.0\n\n\n"
                       "def get_inputs():\n    return [torch.randn(3, 7, 5), torch.randn(3, 5, 9)]\n\n\n"
                       "def get_init_inputs():\n    return []\n")
    rec = recognize(problem)
    assert rec.plan is not None and rec.plan.kind == "fallback", rec.reason
    source = codegen.draft(rec.plan, rec.problem, search.space(rec.plan)[0])
    expected, got = draft_outputs(problem, source, tmp_path)
    torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("name, kind", [("linear_gelu.py", "matmul"), ("conv2d_bias_relu.py", "conv"),
                                        ("layernorm.py", "rowwise")])
def test_what_a_family_claims_stays_that_familys(name, kind):
    rec = recognize(PROBLEMS / name)
    assert rec.plan is not None and rec.plan.kind == kind, rec.reason


def test_builtin_optimizes_a_fallback_problem_and_the_best_evaluates_at_other_sizes(tmp_path, capsys, monkeypatch):
    """End to end on the CPU: the real CLI, graph, evaluator (held-out sizes and constructor
    arguments included, and its check that the candidate's own kernels ran) and workspace."""
    builtin_cpu_env(monkeypatch)
    path = PROBLEMS / "fallback_two_linears.py"
    best, replies = optimize_builtin(path, tmp_path, capsys)
    assert "fallback template" in replies[0] and "fused_" in best
    record = evaluates_ok(path, best, tmp_path, capsys, "--trials", "2")
    assert record["generalizes"] is True  # the held-out variants ran too
