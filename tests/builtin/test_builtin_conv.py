"""The built-in policy's convolutions (agent.builtin.conv): conv1d and conv2d as an implicit GEMM,
drafted and run in Triton's interpreter against the reference on tiny shapes - stride, padding,
dilation (asymmetric too), groups, depthwise, pointwise 1x1, with and without bias, settings from
the module or written in (F.conv2d), elementwise epilogues (a bias parameter, scaling, hardtanh,
GELU, batch norm in inference mode); the same draft at another batch and spatial size; every
configuration of every tile; the float32 precision rule; and what is declined, with the message.
(conv3d and the transposed convolutions, recognized since: tests/builtin/test_builtin_conv_nd.py.)"""
from __future__ import annotations

import itertools
from pathlib import Path

import pytest
import torch

from agent.builtin import codegen, search
from tools.precision import dot_precision
from agent.builtin.recognize import recognize
from helpers_builtin import declined, load_module, one_input_problem

PRECISIONS = dot_precision("fp32")  # the default run's float32 dots: tf32x3, then ieee; never plain tf32

pytestmark = pytest.mark.timeout(240)
_MADE = itertools.count()


@pytest.fixture(autouse=True)
def interpreter(monkeypatch):
    monkeypatch.setenv("TRITON_INTERPRET", "1")


def _problem(tmp_path: Path, body: str, forward: str, shape: tuple[int, ...], init: str = "",
             args: str = "") -> Path:
    return one_input_problem(tmp_path, "conv", body, forward, shape, init, args)


def _draft(problem: Path, tmp_path: Path, config: dict | None = None):
    rec = recognize(problem)
    assert rec.plan is not None, rec.reason
    assert rec.plan.kind == "conv", rec.plan.kind
    source = codegen.draft(rec.plan, rec.problem, config or search.space(rec.plan)[0])
    path = tmp_path / f"{problem.stem}_candidate_{next(_MADE)}.py"
    path.write_text(source)
    return load_module(path), rec


def _same(problem: Path, candidate, inputs: list[torch.Tensor]) -> None:
    ref = load_module(problem)
    init = ref.get_init_inputs()
    torch.manual_seed(3)
    reference = ref.Model(*init)
    torch.manual_seed(3)
    ours = candidate.ModelNew(*init)
    with torch.no_grad():
        expected, got = reference(*inputs), ours(*inputs)
    assert got.dtype == expected.dtype and got.shape == expected.shape
    torch.testing.assert_close(got, expected, rtol=1e-4, atol=1e-4)


BN = ("        self.bn = nn.BatchNorm2d(6)\n        self.bn.running_mean.uniform_(-1.0, 1.0)\n"
      "        self.bn.running_var.uniform_(0.5, 2.0)\n        self.bn.eval()\n")
# name -> (constructor body, forward, input shape)
VARIANTS = {
    "plain_3x3_no_bias": ("        self.conv = nn.Conv2d(3, 5, 3, padding=1, bias=False)\n", "self.conv(x)",
                          (2, 3, 7, 6)),
    "stride_padding_dilation": ("        self.conv = nn.Conv2d(4, 6, (3, 2), stride=(2, 1), padding=(2, 1), "
                                "dilation=(2, 3))\n", "self.conv(x)", (2, 4, 9, 8)),
    "grouped": ("        self.conv = nn.Conv2d(4, 6, 3, stride=2, groups=2)\n", "self.conv(x)", (2, 4, 8, 7)),
    "depthwise": ("        self.conv = nn.Conv2d(5, 5, 3, padding=1, groups=5)\n", "self.conv(x)", (2, 5, 6, 6)),
    "depthwise_multiplier": ("        self.conv = nn.Conv2d(3, 6, 3, groups=3, bias=False)\n", "self.conv(x)",
                             (1, 3, 6, 5)),
    "pointwise_1x1": ("        self.conv = nn.Conv2d(7, 5, 1)\n", "self.conv(x)", (2, 7, 5, 6)),
    "conv1d": ("        self.conv = nn.Conv1d(4, 6, 3, stride=2, padding=2, dilation=2)\n", "self.conv(x)",
               (2, 4, 19)),
    "functional": ("        self.w = nn.Parameter(torch.randn(6, 3, 3, 3))\n",
                   "F.conv2d(x, self.w, None, 2, 1)", (2, 3, 7, 7)),
    "bias_scale_hardtanh_gelu": ("        self.conv = nn.Conv2d(3, 6, 3)\n"
                                 "        self.bias = nn.Parameter(torch.randn(6, 1, 1))\n",
                                 "F.gelu(F.hardtanh((self.conv(x) + self.bias) * 0.5, -0.4, 0.6))", (2, 3, 7, 6)),
    "batch_norm_relu": ("        self.conv = nn.Conv2d(3, 6, 3, stride=2, padding=1)\n" + BN,
                        "torch.relu(self.bn(self.conv(x)))", (2, 3, 9, 8)),
}


@pytest.mark.parametrize("name", sorted(VARIANTS))
def test_each_variant_matches_the_reference(name, tmp_path):
    body, forward, shape = VARIANTS[name]
    problem = _problem(tmp_path, body, forward, shape)
    candidate, rec = _draft(problem, tmp_path)
    torch.manual_seed(4)
    _same(problem, candidate, [torch.randn(shape)])


@pytest.mark.parametrize("name, others", [
    ("stride_padding_dilation", ((3, 4, 9, 8), (1, 4, 13, 11), (3, 4, 5, 17))),
    ("depthwise", ((3, 5, 6, 6), (1, 5, 11, 4))),  # the direct kernel
    ("conv1d", ((3, 4, 19), (1, 4, 33))),
])
def test_the_draft_is_general_over_batch_and_spatial_size(name, others, tmp_path):
    body, forward, shape = VARIANTS[name]
    problem = _problem(tmp_path, body, forward, shape)
    candidate, _ = _draft(problem, tmp_path)
    torch.manual_seed(5)
    for other in others:
        _same(problem, candidate, [torch.randn(other)])


def test_every_configuration_of_a_grouped_conv_is_correct(tmp_path):
    body, forward, shape = VARIANTS["grouped"]
    problem = _problem(tmp_path, body, forward, shape)
    rec = recognize(problem)
    configs = search.space(rec.plan)
    assert len(configs) >= 4
    torch.manual_seed(6)
    x = torch.randn(shape)
    for config in configs[:: max(1, len(configs) // 4)]:
        candidate, _ = _draft(problem, tmp_path, config)
        _same(problem, candidate, [x])


def test_a_depthwise_conv_takes_the_direct_kernel_first_and_the_grouped_gemm_too(tmp_path):
    body, forward, shape = VARIANTS["depthwise_multiplier"]
    problem = _problem(tmp_path, body, forward, shape)
    rec = recognize(problem)
    configs = search.space(rec.plan)
    assert configs[0]["direct"] is True and configs[0]["precision"] == "ieee"
    gemm = next(c for c in configs if not c.get("direct"))
    torch.manual_seed(7)
    x = torch.randn(shape)
    for config in (configs[0], gemm):
        candidate, _ = _draft(problem, tmp_path, config)
        assert ("conv_direct_kernel[grid]" in Path(candidate.__file__).read_text()) == bool(config.get("direct"))
        _same(problem, candidate, [x])


def test_float32_dots_are_ieee_or_tf32x3_never_tf32(tmp_path):
    body, forward, shape = VARIANTS["batch_norm_relu"]
    rec = recognize(_problem(tmp_path, body, forward, shape))
    configs = search.space(rec.plan)
    assert {c["precision"] for c in configs} == set(PRECISIONS)
    for name in ("depthwise", "grouped", "conv1d"):  # every float32 configuration records its precision
        other = recognize(_problem(tmp_path, *VARIANTS[name]))
        assert all(c["precision"] in PRECISIONS for c in search.space(other.plan))
    source = codegen.draft(rec.plan, rec.problem, configs[0])
    assert 'input_precision="tf32x3"' in source and 'input_precision="tf32"' not in source
    with pytest.raises(Exception, match="under fp32 \\(tf32x3, ieee only\\)"):
        codegen.draft(rec.plan, rec.problem, {**configs[0], "precision": "tf32"})


def test_a_tf32_run_tries_plain_tf32_dots_first(tmp_path):
    """Under --precision tf32 the baselines run TF32 too: the space starts with plain TF32 dots
    and keeps the float32-accurate ones after them."""
    body, forward, shape = VARIANTS["batch_norm_relu"]
    rec = recognize(_problem(tmp_path, body, forward, shape))
    rec.plan.precision = "tf32"
    configs = search.space(rec.plan)
    assert configs[0]["precision"] == "tf32" and {c["precision"] for c in configs} == {"tf32", "tf32x3", "ieee"}
    source = codegen.draft(rec.plan, rec.problem, configs[0])
    assert 'input_precision="tf32"' in source


# reductions after the convolution (group norm, softmax, a global mean) are drafted by
# agent.builtin.conv_reduce: tests/builtin/test_builtin_conv_reduce.py, with what it still declines
@pytest.mark.parametrize("body, forward, shape, reason", [
    ("        self.conv = nn.Conv2d(4, 6, 3)\n        self.norm = nn.GroupNorm(2, 6)\n",
     "self.norm(self.conv(x)).sum(dim=1)", (2, 4, 6, 6), "reductions over different shapes or dimensions"),
    ("        self.conv = nn.Conv2d(4, 6, 3)\n", "F.max_pool2d(self.conv(x), 2)", (2, 4, 6, 6),
     "a max_pool2d with the convolution"),
    ("        self.conv = nn.Conv2d(4, 4, 3)\n", "self.conv(torch.relu(x))", (2, 4, 6, 6),
     "a convolution of a computed input or weight (elementwise work before it)"),
])
def test_what_is_declined_says_why_in_one_line(body, forward, shape, reason, tmp_path):
    rec = recognize(_problem(tmp_path, body, forward, shape))
    why = declined(rec)  # the fallback drafts it (or keeps eager): the conv family's reason is named
    assert reason in why and "\n" not in why
