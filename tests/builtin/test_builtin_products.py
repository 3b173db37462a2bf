"""The built-in policy's product plans besides the tiled matmul (agent.builtin.products): gemv
(a side of at most 8), mm_reduce (reductions over the product's last dim), and the matmul plan's
shape-picked configurations and split-K (agent.builtin.skinny). Each draft runs in Triton's
interpreter against the reference, for every variant of its template; the KernelBench-sized
problems are only recognized (on the meta device) and their configurations checked."""
from __future__ import annotations

import itertools
from pathlib import Path

import pytest
import torch

from agent.builtin import codegen, configs, search
from agent.builtin.recognize import recognize
from tools.guard import scan as guard
from tools.judge.compare import tolerance_for
from helpers_builtin import declined, draft_outputs, load_module

HERE = Path(__file__).parents[1]
PROBLEMS = HERE / "builtin_problems"
pytestmark = pytest.mark.timeout(240)
_LOADED = itertools.count()

# problem -> (plan kind, a word of its summary)
RECOGNIZED = {
    "gemv.py": ("gemv", "48 x 600 side"),
    "matvec_relu.py": ("gemv", "matvec"),
    "vector_left.py": ("gemv", "72 x 300 side"),
    "linear_few_rows.py": ("gemv", "3 vectors"),
    "linear_sum.py": ("mm_reduce", "sum over its last dim (one value per row)"),
    "linear_max_gelu.py": ("mm_reduce", "max over its last dim"),
    "linear_softmax.py": ("mm_reduce", "softmax/sum over its last dim (full rows)"),
    "long_k.py": ("matmul", "24x40"),
}
# problem -> configurations to run besides the space's first: (name, change to a configuration of the space)
VARIANTS = {
    "gemv.py": [("split", {"SPLIT_K": 3, "BLOCK_K": 32}), ("tall tile", {"BLOCK_R": 32, "BLOCK_K": 64}),
                ("K a multiple of BLOCK_K, unmasked", {"SPLIT_K": 2, "BLOCK_K": 8})],
    "matvec_relu.py": [("split", {"SPLIT_K": 4, "BLOCK_K": 16})],
    "vector_left.py": [("no split", {"SPLIT_K": 1}), ("odd split", {"SPLIT_K": 5, "BLOCK_K": 32})],
    "linear_few_rows.py": [("split", {"SPLIT_K": 2, "BLOCK_K": 64}), ("one vector a program", {"BLOCK_J": 1}),
                           ("K a multiple of BLOCK_K, unmasked", {"BLOCK_K": 8})],
    "linear_sum.py": [("two passes", {"fused": False}), ("split", {"fused": False, "SPLIT_K": 2})],
    "linear_max_gelu.py": [("two passes", {"fused": False}), ("narrow chunks", {"fused": True, "BLOCK_N": 16})],
    "linear_softmax.py": [("two passes", {"fused": False}), ("split", {"fused": False, "SPLIT_K": 2, "BLOCK_R": 32})],
    "long_k.py": [("no split", {"SPLIT_K": 1})],
}


@pytest.fixture(autouse=True)
def interpreter(monkeypatch):
    monkeypatch.setenv("TRITON_INTERPRET", "1")


def _config(plan, change: dict) -> dict:
    """The first configuration of the space that has the change's variant keys, with the change."""
    space = search.space(plan)
    variant = {k: v for k, v in change.items() if k == "fused"}
    base = next(c for c in space if all(c.get(k) == v for k, v in variant.items()))
    return {**base, **change}


def _check(path: Path, source: str, tmp_path: Path) -> None:
    expected, got = draft_outputs(path, source, tmp_path)
    assert got.shape == expected.shape and got.dtype == expected.dtype
    tol = tolerance_for(expected.dtype)
    rms = expected.float().pow(2).mean().sqrt().item() or 1.0
    torch.testing.assert_close(got, expected, rtol=tol.rtol / 10, atol=tol.atol * rms / 10)  # IEEE: 10x tighter


@pytest.mark.parametrize("name", sorted(RECOGNIZED))
def test_each_product_plan_and_every_variant_of_its_kernel_is_correct(name, tmp_path):
    kind, words = RECOGNIZED[name]
    rec = recognize(PROBLEMS / name)
    assert rec.plan is not None, rec.reason
    assert rec.plan.kind == kind and words in rec.plan.summary, rec.plan.summary
    configs = [search.space(rec.plan)[0]] + [_config(rec.plan, change) for _, change in VARIANTS[name]]
    for config in configs:
        source = codegen.draft(rec.plan, rec.problem, config)
        assert guard.check(source).violations == []
        assert "tl.atomic" not in source and "tf32" not in source  # ordered sums; IEEE float32
        _check(PROBLEMS / name, source, tmp_path)


def test_split_passes_are_two_kernels_and_fused_is_one():
    rec = recognize(PROBLEMS / "linear_softmax.py")
    fused = codegen.draft(rec.plan, rec.problem, _config(rec.plan, {"fused": True}))
    two = codegen.draft(rec.plan, rec.problem, _config(rec.plan, {"fused": False}))
    assert fused.count("@triton.jit") == 1 and two.count("@triton.jit") == 2
    assert 'input_precision="ieee"' in fused and 'input_precision="ieee"' in two
    assert "torch.softmax" not in fused.split("def forward")[1] and ".linear(" not in fused
    rec = recognize(PROBLEMS / "gemv.py")
    assert codegen.draft(rec.plan, rec.problem, {**search.space(rec.plan)[0], "SPLIT_K": 1}).count("@triton.jit") == 1
    assert codegen.draft(rec.plan, rec.problem, {**search.space(rec.plan)[0], "SPLIT_K": 2}).count("@triton.jit") == 2


def _problem(tmp_path: Path, name: str, forward: str, inputs: str, sizes: str) -> Path:
    path = tmp_path / f"{name}.py"
    path.write_text(f"import torch\nimport torch.nn as nn\n\n{sizes}\n\n\nclass Model(nn.Module):\n"
                    f"    def __init__(self):\n        super().__init__()\n\n    def forward(self, a, b):\n"
                    f"        return {forward}\n\n\ndef get_inputs():\n    return [{inputs}]\n\n\n"
                    f"def get_init_inputs():\n    return []\n")
    return path


def test_kernelbench_sized_gemv_splits_k_to_fill_the_gpu_and_indexes_in_int64(tmp_path):
    """A (2048 x 1048576, 8 GiB) @ x: the default streams 8 rows a program; 256 row blocks alone
    leave the memory system idle, so K is split until there are about 8 programs per SM."""
    path = _problem(tmp_path, "gemv_kb", "torch.matmul(a, b)", "torch.randn(M, K), torch.randn(K, 1)",
                    "M = 2048\nK = 1048576")
    rec = recognize(path)
    assert rec.plan.kind == "gemv"
    first = search.space(rec.plan)[0]
    programs = (2048 // first["BLOCK_R"]) * first["SPLIT_K"]
    assert first["SPLIT_K"] > 1 and programs >= 4 * configs.SMS
    source = codegen.draft(rec.plan, rec.problem, first)
    assert "pid_r.to(tl.int64)" in source and "combine_kernel" in source


def test_tall_skinny_takes_k_in_one_step_in_ieee_only(tmp_path):
    path = _problem(tmp_path, "tall_skinny", "torch.matmul(a, b)", "torch.randn(M, N), torch.randn(N, M)",
                    "M = 32768\nN = 32")
    rec = recognize(path)
    space = search.space(rec.plan)
    assert rec.plan.kind == "matmul"
    assert space[0]["BLOCK_K"] == 32 and space[0]["num_stages"] == 1 and space[0]["BLOCK_M"] * space[0]["BLOCK_N"] >= 128 * 128
    assert {c.get("precision") for c in space} == {"ieee"}


def test_few_output_tiles_and_a_long_k_split_k_first(tmp_path):
    path = _problem(tmp_path, "large_k", "torch.matmul(a, b)", "torch.randn(M, K), torch.randn(K, N)",
                    "M = 256\nN = 256\nK = 524288")
    rec = recognize(path)
    first = search.space(rec.plan)[0]
    tiles = (256 // first["BLOCK_M"]) * (256 // first["BLOCK_N"])
    assert first.get("SPLIT_K", 1) > 1 and tiles * first["SPLIT_K"] >= configs.SMS and first["precision"] == "ieee"
    assert "partial_product_kernel" in codegen.draft(rec.plan, rec.problem, first)
    # an ordinary product keeps the matmul template's own order (nothing shape-picked is put first)
    ordinary = recognize(PROBLEMS / "linear_gelu.py").plan
    assert all("SPLIT_K" not in c for c in search.space(ordinary))


def test_a_small_long_k_product_splits_k_and_is_correct_at_other_sizes(tmp_path):
    rec = recognize(PROBLEMS / "long_k.py")
    config = search.space(rec.plan)[0]
    assert config["SPLIT_K"] > 1
    path = tmp_path / "long_k_candidate.py"
    path.write_text(codegen.draft(rec.plan, rec.problem, config))
    candidate = load_module(path)
    torch.manual_seed(6)
    a, b = torch.randn(7, 1000), torch.randn(1000, 9)  # K not a multiple of the chunk, nor of BLOCK_K
    torch.testing.assert_close(candidate.ModelNew()(a, b), torch.relu(a @ b) * 2.0, rtol=1e-4, atol=1e-4)


def test_products_it_declines_say_what(tmp_path):
    batched = _problem(tmp_path, "bmm_sum", "torch.bmm(a, b).sum(dim=2)", "torch.randn(2, 8, 12), torch.randn(2, 12, 10)",
                       "")
    assert "(a batched matrix product followed by a reduction)" in declined(recognize(batched))  # the fallback's
    over_rows = _problem(tmp_path, "col_sum", "torch.matmul(a, b).sum(dim=0)", "torch.randn(8, 12), torch.randn(12, 10)",
                         "")
    reason = declined(recognize(over_rows))
    assert "(a reduction over dims [0] of a [8, 10] value after a 8x10 matrix product" in reason, reason


@pytest.mark.parametrize("name, change", [
    ("gemv.py", {"SPLIT_K": 3, "BLOCK_K": 32}), ("linear_few_rows.py", {"SPLIT_K": 1}),
    ("vector_left.py", {"SPLIT_K": 1}), ("linear_softmax.py", {"fused": True}),
    ("linear_sum.py", {"fused": False, "SPLIT_K": 2}), ("long_k.py", {}),
])
def test_the_int64_indexing_variants_compute_the_same(name, change, tmp_path, monkeypatch):
    """Problems past 2^31 elements (the 8 GiB GEMV) index in int64: the same drafts with int64
    offsets, on a small problem."""
    from agent.builtin import general

    monkeypatch.setattr(general, "needs_int64", lambda plan: True)
    rec = recognize(PROBLEMS / name)
    source = codegen.draft(rec.plan, rec.problem, _config(rec.plan, change))
    assert "tl.int64" in source
    _check(PROBLEMS / name, source, tmp_path)


def test_once_timed_the_search_tries_the_fastest_with_k_split_otherwise(tmp_path):
    path = _problem(tmp_path, "gemv_kb", "torch.matmul(a, b)", "torch.randn(M, K), torch.randn(K, 1)",
                    "M = 2048\nK = 1048576")
    plan = recognize(path).plan
    space = search.space(plan)
    fastest, other = space[0], next(c for c in space[1:] if c["BLOCK_R"] != space[0]["BLOCK_R"])
    proposal = search.next_config(plan, [search.Outcome(fastest, "ok", 1.0), search.Outcome(other, "ok", 2.0)])
    assert [k for k in proposal if proposal[k] != fastest[k]] == ["SPLIT_K"]


@pytest.mark.parametrize("forward, inputs, orientation", [
    ("torch.matmul(a.t(), b)", "torch.randn(K, M), torch.randn(K, 1)", "rows"),  # A^T @ x: A read down its columns
    ("torch.mv(a.t(), b)", "torch.randn(K, M), torch.randn(K)", "rows"),
    ("torch.matmul(b, a.t())", "torch.randn(M, K), torch.randn(2, K)", "cols"),  # x @ A^T: A's rows contiguous
    ("torch.matmul(b.t(), a)", "torch.randn(K, M), torch.randn(K, 3)", "cols"),  # x^T @ A: a vector on the left
])
def test_transposed_forms_stream_the_matrix_through_its_strides(forward, inputs, orientation, tmp_path):
    from agent.builtin.products import gemv_sides

    path = _problem(tmp_path, "transposed", forward, inputs, "M = 40\nK = 300")
    rec = recognize(path)
    assert rec.plan.kind == "gemv" and gemv_sides(rec.plan)[0] == orientation
    for config in search.space(rec.plan)[:2]:
        _check(path, codegen.draft(rec.plan, rec.problem, config), tmp_path)
