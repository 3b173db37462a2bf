"""The built-in policy's cross-entropy plan (agent.builtin.cross_entropy): F.cross_entropy,
nn.CrossEntropyLoss and F.nll_loss of a log_softmax, with each reduction and ignored targets, are
one Triton kernel (and a one-program sum) that runs in Triton's interpreter against the reference
at sizes that are not multiples of its blocks, and the same draft at other row and class counts; a
target that is no class gives NaN, not a read out of bounds; what it does not compute is declined
with a reason."""
from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch

from agent.builtin import codegen, search
from agent.builtin.recognize import recognize
from helpers_builtin import load_module

pytestmark = pytest.mark.timeout(240)

FORMS = {  # name -> (__init__ body, forward body, logits dtype)
    "functional_mean": ("pass", "return F.cross_entropy(x, t)", "float32"),
    "module_sum": ("self.loss = nn.CrossEntropyLoss(reduction='sum')", "return self.loss(x, t)", "float32"),
    "nll_of_log_softmax_none": ("pass", "return F.nll_loss(F.log_softmax(x, dim=-1), t, reduction='none')", "float32"),
    "ignore_index_mean": ("pass", "return F.cross_entropy(x, t, ignore_index=3)", "float32"),
    "half_logits": ("pass", "return F.cross_entropy(x, t)", "float16"),
}


@pytest.fixture(autouse=True)
def interpreter(monkeypatch):
    monkeypatch.setenv("TRITON_INTERPRET", "1")


def _problem(tmp_path: Path, name: str, init: str, body: str, dtype: str = "float32", rows: int = 37,
             classes: int = 300) -> Path:
    path = tmp_path / f"{name}.py"
    path.write_text("import torch\nimport torch.nn as nn\nimport torch.nn.functional as F\n\n\n"
                    f"class Model(nn.Module):\n    def __init__(self):\n        super().__init__()\n        {init}\n\n"
                    f"    def forward(self, x, t):\n        {body}\n\n\n"
                    f"def get_inputs():\n    return [torch.randn({rows}, {classes}, dtype=torch.{dtype}), "
                    f"torch.randint(0, {classes}, ({rows},))]\n\n\ndef get_init_inputs():\n    return []\n")
    return path


def _draft(path: Path, tmp_path: Path, config: dict | None = None):
    rec = recognize(path)
    assert rec.plan is not None and rec.plan.kind == "cross_entropy", rec.reason
    source = codegen.draft(rec.plan, rec.problem, config or search.space(rec.plan)[0])
    assert source.count("@triton.jit") == 2
    candidate = tmp_path / f"{path.stem}_candidate.py"
    candidate.write_text(source)
    return load_module(path).Model(), load_module(candidate).ModelNew(), rec


@pytest.mark.parametrize("name", sorted(FORMS))
def test_each_form_is_one_kernel_and_matches_torch_at_other_sizes(name, tmp_path):
    init, body, dtype = FORMS[name]
    ref, ours, rec = _draft(_problem(tmp_path, name, init, body, dtype), tmp_path)
    torch.manual_seed(3)
    for rows, classes in ((37, 300), (70, 7)):  # the problem's, then more rows of fewer classes
        x = torch.randn(rows, classes).to(getattr(torch, dtype)) * 3
        t = torch.randint(0, classes, (rows,))
        t[::4] = 3 if "ignore" in name else t[::4]
        expected, got = ref(x, t), ours(x, t)
        assert got.shape == expected.shape and got.dtype == expected.dtype
        tol = 1e-5 if dtype == "float32" else 2e-3
        torch.testing.assert_close(got.float(), expected.float(), rtol=tol, atol=tol)


def test_every_configuration_is_correct_and_wide_rows_take_blocks_of_classes(tmp_path):
    path = _problem(tmp_path, "wide", "pass", "return F.cross_entropy(x, t, reduction='sum')", rows=9, classes=5000)
    rec = recognize(path)
    space = search.space(rec.plan)
    assert all(c["BLOCK_C"] < 5000 for c in space)  # the row in several blocks: the running log-sum-exp
    torch.manual_seed(4)
    x, t = torch.randn(9, 5000) * 10 + 40, torch.randint(0, 5000, (9,))  # far from zero: the maximum matters
    for config in space:
        ref, ours, _ = _draft(path, tmp_path, config)
        torch.testing.assert_close(ours(x, t), ref(x, t), rtol=1e-5, atol=1e-4)


def test_all_targets_ignored_is_nan_and_a_target_past_the_classes_is_nan_not_a_stray_read(tmp_path):
    ref, ours, _ = _draft(_problem(tmp_path, "edges", "pass", "return F.cross_entropy(x, t)", rows=6, classes=10),
                          tmp_path)
    x = torch.randn(6, 10)
    everything_ignored = torch.full((6,), -100)
    assert math.isnan(float(ours(x, everything_ignored))) and math.isnan(float(ref(x, everything_ignored)))
    assert math.isnan(float(ours(x, torch.tensor([0, 1, 2, 3, 4, 10]))))  # torch raises; the kernel reads nothing


@pytest.mark.parametrize("init, body, words", [
    ("self.register_buffer('w', torch.rand(300))", "return F.cross_entropy(x, t, weight=self.w)", "class weights"),
    ("pass", "return F.cross_entropy(x, t, label_smoothing=0.1)", None),
    ("pass", "return F.cross_entropy(x, t) * 2.0", "beside the cross-entropy"),
])
def test_what_the_kernel_does_not_compute_is_not_drafted_as_cross_entropy(init, body, words, tmp_path):
    rec = recognize(_problem(tmp_path, "declined", init, body))
    assert rec.plan is None or rec.plan.kind != "cross_entropy", rec.plan.summary
    if words is not None and rec.plan is None:
        assert words in rec.reason and "\n" not in rec.reason, rec.reason
