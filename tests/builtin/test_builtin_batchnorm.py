"""The built-in policy's batch norm in training mode (agent.builtin.batchnorm): an nn.BatchNorm1d/2d/3d
left in training mode, after a Linear or a convolution (left to torch) or on an input, with
elementwise work before and after it. Each chain is recognized as the batchnorm kind, drafted and run
in Triton's interpreter beside the reference (outputs, and the running statistics the module updates,
over two calls, then in eval()); one draft at other batch and spatial sizes; one problem end to end
through `ratchet optimize` and `ratchet eval` (the evaluator's held-out sizes included); a batch norm
put in eval() stays the elementwise (pointwise) plan it was; what is still declined, with the message."""
from __future__ import annotations

import itertools
from pathlib import Path

import pytest
import torch

from agent.builtin import codegen, search
from agent.builtin.recognize import recognize
from helpers_builtin import (builtin_cpu_env, declined, draft_outputs, evaluates_ok, load_module, one_input_problem,
                             optimize_builtin, resized)

PROBLEMS = Path(__file__).parents[1] / "builtin_problems"
pytestmark = pytest.mark.timeout(240)
_MADE = itertools.count()


@pytest.fixture(autouse=True)
def interpreter(monkeypatch):
    monkeypatch.setenv("TRITON_INTERPRET", "1")


def _problem(tmp_path: Path, body: str, forward: str, shape: tuple[int, ...]) -> Path:
    return one_input_problem(tmp_path, "batchnorm", body, forward, shape)


def _draft(problem: Path, tmp_path: Path, config: dict | None = None):
    rec = recognize(problem)
    assert rec.plan is not None, rec.reason
    assert rec.plan.kind == "batchnorm", rec.plan.summary
    source = codegen.draft(rec.plan, rec.problem, config or search.space(rec.plan)[0])
    path = tmp_path / f"{problem.stem}_candidate_{next(_MADE)}.py"
    path.write_text(source)
    return load_module(path)


def _buffers(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    return {name: b.clone() for name, b in model.named_buffers()}


def _same(problem: Path, candidate, inputs: list[list[torch.Tensor]]) -> None:
    """Outputs and buffers (running statistics, batches counted) after each call, then in eval()."""
    ref = load_module(problem)
    torch.manual_seed(3)
    reference = ref.Model()
    torch.manual_seed(3)
    ours = candidate.ModelNew()
    with torch.no_grad():
        for xs in inputs:
            expected, got = reference(*xs), ours(*xs)
            assert got.dtype == expected.dtype and got.shape == expected.shape
            torch.testing.assert_close(got, expected, rtol=1e-4, atol=1e-4)
            mine, theirs = _buffers(ours), _buffers(reference)
            assert mine.keys() == theirs.keys()
            for name in theirs:
                torch.testing.assert_close(mine[name], theirs[name], rtol=1e-4, atol=1e-5, msg=name)
        reference.eval()
        ours.eval()
        torch.testing.assert_close(ours(*inputs[0]), reference(*inputs[0]), rtol=1e-4, atol=1e-4)


# name -> (constructor body, forward, input shape)
CHAINS = {
    "linear_scale_relu": ("        self.gemm = nn.Linear(5, 12)\n        self.scale = nn.Parameter(torch.randn(12))\n"
                          "        self.bn = nn.BatchNorm1d(12, momentum=0.3)",
                          "torch.relu(self.bn(self.gemm(x) * self.scale))", (9, 5)),
    "linear_bias_swish": ("        self.gemm = nn.Linear(6, 10)\n        self.bn = nn.BatchNorm1d(10, eps=1e-3)\n"
                          "        self.bias = nn.Parameter(torch.randn(1))",
                          "(y := (self.bn(self.gemm(x)) + self.bias) / 1.5) * torch.sigmoid(y)", (7, 6)),
    "conv2d_relu_bn_scale": ("        self.conv = nn.Conv2d(3, 5, 3)\n        self.bn = nn.BatchNorm2d(5)",
                             "self.bn(torch.relu(self.conv(x))) * 2.0", (2, 3, 7, 6)),
    "conv_transpose3d_scale_bn": ("        self.conv = nn.ConvTranspose3d(2, 4, 3, stride=2, padding=1)\n"
                                  "        self.bn = nn.BatchNorm3d(4)",
                                  "self.bn(self.conv(x) * 0.5) - 0.25", (2, 2, 3, 4, 3)),
    "input_bn1d_sequence_no_affine": ("        self.bn = nn.BatchNorm1d(4, affine=False)",
                                      "torch.tanh(self.bn(x * 3.0 + 7.0))", (5, 4, 11)),
    "untracked_bn2d_residual": ("        self.bn = nn.BatchNorm2d(3, track_running_stats=False)",
                                "self.bn(x) + x", (3, 3, 4, 5)),
}


@pytest.mark.parametrize("name", sorted(CHAINS))
def test_each_chain_matches_the_reference_and_its_running_statistics(name, tmp_path):
    body, forward, shape = CHAINS[name]
    problem = _problem(tmp_path, body, forward, shape)
    candidate = _draft(problem, tmp_path)
    torch.manual_seed(4)
    _same(problem, candidate, [[torch.randn(shape)], [torch.randn(shape) * 2.0 + 1.0]])


def test_every_configuration_and_other_sizes_give_the_reference(tmp_path):
    """The layouts of the statistics pass (channels contiguous, or one sample's positions) are both
    right at any size: each configuration of the conv problem, and the draft at other batch and
    spatial sizes (a single sample of one position per channel included, as torch refuses it)."""
    body, forward, shape = CHAINS["conv2d_relu_bn_scale"]
    problem = _problem(tmp_path, body, forward, shape)
    configs = search.space(recognize(problem).plan)
    assert configs[0]["layout"] == "spatial" and len(configs) > 4
    torch.manual_seed(5)
    x = torch.randn(shape)
    for config in configs[1:4] + [{**configs[0], "layout": "rows", "BLOCK_R": 16, "BLOCK_C": 16}]:
        _same(problem, _draft(problem, tmp_path, config), [[x]])
    candidate = _draft(problem, tmp_path)
    _same(problem, candidate, [[torch.randn(5, 3, 9, 4)], [torch.randn(1, 3, 5, 11)]])
    with pytest.raises(ValueError, match="more than 1 value per channel"):
        candidate.ModelNew()(torch.randn(1, 3, 3, 3))


def test_linear_problem_is_drafted_with_channels_contiguous(tmp_path):
    rec = recognize(PROBLEMS / "batchnorm_linear_gelu.py")
    assert rec.plan is not None and rec.plan.kind == "batchnorm", rec.reason
    assert rec.plan.summary.startswith("linear in torch, then batch norm in training mode on 12x20")
    config = search.space(rec.plan)[0]
    assert config["layout"] == "rows"
    source = codegen.draft(rec.plan, rec.problem, config)
    assert "torch.mm(" in source and "self.bn.num_batches_tracked.add_(1)" in source
    expected, got = draft_outputs(PROBLEMS / "batchnorm_linear_gelu.py", source, tmp_path)
    torch.testing.assert_close(got, expected, rtol=1e-4, atol=1e-4)


def test_eval_mode_batch_norm_stays_elementwise(tmp_path):
    """The control: a batch norm put in eval() normalizes with its running statistics, an
    elementwise plan (pointwise), drafted as before."""
    problem = PROBLEMS / "batch_norm_eval.py"
    rec = recognize(problem)
    assert rec.plan is not None and rec.plan.kind == "pointwise", rec.reason
    expected, got = draft_outputs(problem, codegen.draft(rec.plan, rec.problem, search.space(rec.plan)[0]), tmp_path)
    torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("body, forward, shape, reason", [
    ("        self.gemm = nn.Linear(5, 8)\n        self.bn = nn.BatchNorm1d(8)",
     "torch.softmax(self.bn(self.gemm(x)), dim=1)", (4, 5),
     "a softmax after a batch norm in training mode (its kernels fuse elementwise work only)"),
    ("        self.bn = nn.BatchNorm2d(3)", "(y := self.bn(x)) - y.mean(dim=(2, 3), keepdim=True)", (2, 3, 4, 4),
     "a reduction after a batch norm in training mode (its kernels fuse elementwise work only)"),
    ("        self.bn = nn.BatchNorm2d(3)\n        self.bn2 = nn.BatchNorm2d(3)", "self.bn2(self.bn(x))", (2, 3, 4, 4),
     "more than one batch norm in training mode in one forward"),
])
def test_what_is_still_declined_says_why_in_one_line(body, forward, shape, reason, tmp_path):
    rec = recognize(_problem(tmp_path, body, forward, shape))
    assert f"({reason})" in declined(rec), declined(rec)  # the fallback drafts it, or keeps eager


def test_builtin_optimizes_and_the_best_evaluates_at_other_sizes(tmp_path, capsys, monkeypatch):
    """End to end on the CPU: the real CLI, graph, evaluator (held-out sizes and constructor
    arguments included) and workspace; then `ratchet eval` on a copy at other sizes."""
    builtin_cpu_env(monkeypatch)
    path = PROBLEMS / "batchnorm_linear_gelu.py"
    best, replies = optimize_builtin(path, tmp_path, capsys)
    assert "bn_partial_kernel[" in best and "bn_apply_kernel[" in best and "batchnorm template" in replies[0]
    record = evaluates_ok(path, best, tmp_path, capsys, "--trials", "2")
    assert record["generalizes"] is True  # the held-out variants ran too
    sizes = "batch_size, in_features, out_features = 12, 10, 20"
    other = resized(path, tmp_path / "other", line=(sizes, "batch_size, in_features, out_features = 7, 13, 9"))
    evaluates_ok(other, best, tmp_path, capsys, "--trials", "2")
