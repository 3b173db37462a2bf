"""The built-in policy's 3-d and transposed convolutions (agent.builtin.conv): conv3d and
conv_transpose1d/2d/3d through the implicit GEMM (the transposed ones in gather form), drafted and
run in Triton's interpreter against the reference on tiny shapes - stride, padding, output_padding,
dilation (asymmetric too), groups, depthwise, with and without bias, settings from the module or
written in (F.conv_transpose2d), an elementwise epilogue, stride phases without a tap; the same
draft at another batch and spatial size; the stride-phase kernel (a strided transposed
convolution's first configuration) and the plain gather (its last); the float32 precision rule;
float16 with the native dot. (The 1-d and 2-d
forward convolutions: tests/builtin/test_builtin_conv.py, whose helpers these tests share.)"""
from __future__ import annotations

from pathlib import Path

import pytest
import torch

from agent.builtin import search
from tools.precision import dot_precision
from agent.builtin.recognize import recognize
from helpers_builtin import load_module
from test_builtin_conv import _draft, _problem, _same
from test_builtin_conv_reduce import _draft as _draft_reduced

PRECISIONS = dot_precision("fp32")  # the default run's float32 dots: tf32x3, then ieee; never plain tf32

pytestmark = pytest.mark.timeout(240)


@pytest.fixture(autouse=True)
def interpreter(monkeypatch):
    monkeypatch.setenv("TRITON_INTERPRET", "1")


BN3 = ("        self.bn = nn.BatchNorm3d(4)\n        self.bn.running_mean.uniform_(-1.0, 1.0)\n"
       "        self.bn.running_var.uniform_(0.5, 2.0)\n        self.bn.eval()\n")
# name -> (constructor body, forward, input shape, pattern in the plan's summary)
VARIANTS = {
    "conv3d_stride_padding_dilation": ("        self.conv = nn.Conv3d(3, 5, (3, 2, 3), stride=(2, 1, 1), "
                                       "padding=(1, 0, 2), dilation=(1, 2, 1))\n", "self.conv(x)", (2, 3, 5, 6, 7),
                                       "conv3d 3x2x3 (stride 2x1x1, padding 1x0x2, dilation 1x2x1)"),
    "conv3d_grouped_no_bias": ("        self.conv = nn.Conv3d(4, 6, 3, padding=1, groups=2, bias=False)\n",
                               "self.conv(x)", (2, 4, 4, 5, 6), "conv3d 3x3x3 (padding 1, groups 2)"),
    "conv3d_depthwise": ("        self.conv = nn.Conv3d(4, 4, 3, stride=2, padding=1, groups=4)\n", "self.conv(x)",
                         (2, 4, 5, 6, 7), "conv3d 3x3x3 (stride 2, padding 1, depthwise)"),
    "conv3d_batch_norm_relu": ("        self.conv = nn.Conv3d(3, 4, 2)\n" + BN3, "torch.relu(self.bn(self.conv(x)))",
                               (2, 3, 4, 5, 6), "conv3d 2x2x2"),
    "transpose1d_dilated": ("        self.conv = nn.ConvTranspose1d(3, 4, 3, stride=2, padding=2, dilation=3)\n",
                            "self.conv(x)", (2, 3, 9), "conv_transpose1d 3 (stride 2, padding 2, dilation 3)"),
    "transpose2d_output_padding": ("        self.conv = nn.ConvTranspose2d(4, 5, 3, stride=2, padding=1, "
                                   "output_padding=1)\n", "self.conv(x)", (2, 4, 5, 6),
                                   "conv_transpose2d 3x3 (stride 2, padding 1, output_padding 1)"),
    "transpose2d_grouped_asymmetric": ("        self.conv = nn.ConvTranspose2d(4, 6, (3, 2), stride=(2, 3), "
                                       "padding=(1, 0), output_padding=(0, 1), groups=2, dilation=(1, 2), "
                                       "bias=False)\n", "self.conv(x)", (2, 4, 5, 6),
                                       "conv_transpose2d 3x2 (stride 2x3, padding 1x0, output_padding 0x1, "
                                       "dilation 1x2, groups 2)"),
    "transpose2d_phases_without_taps": ("        self.conv = nn.ConvTranspose2d(3, 4, 2, stride=(3, 2), "
                                        "dilation=(1, 2), output_padding=(2, 1))\n", "self.conv(x)", (2, 3, 4, 3),
                                        "conv_transpose2d 2x2 (stride 3x2, output_padding 2x1, dilation 1x2)"),
    "transpose2d_depthwise": ("        self.conv = nn.ConvTranspose2d(4, 4, 3, stride=2, groups=4)\n",
                              "self.conv(x)", (1, 4, 3, 4), "conv_transpose2d 3x3 (stride 2, depthwise)"),
    "transpose2d_functional": ("        self.w = nn.Parameter(torch.randn(3, 2, 3, 3))\n",
                               "F.conv_transpose2d(x, self.w, None, 2, 1, 1)", (2, 3, 5, 4),
                               "conv_transpose2d 3x3 (stride 2, padding 1, output_padding 1)"),
    "transpose2d_output_size": ("        self.conv = nn.ConvTranspose2d(4, 3, 3, stride=2, padding=1)\n",
                                "self.conv(x, output_size=[10, 12])", (2, 4, 5, 6),
                                "conv_transpose2d 3x3 (stride 2, padding 1, output_padding 1)"),
    "transpose3d_scale_relu": ("        self.conv = nn.ConvTranspose3d(3, 4, 3, stride=2, padding=1, "
                               "output_padding=1)\n        self.scale = 0.5\n",
                               "torch.relu(self.conv(x) * self.scale)", (2, 3, 3, 4, 5),
                               "conv_transpose3d 3x3x3 (stride 2, padding 1, output_padding 1)"),
}


@pytest.mark.parametrize("name", sorted(VARIANTS))
def test_each_variant_matches_the_reference(name, tmp_path):
    body, forward, shape, pattern = VARIANTS[name]
    problem = _problem(tmp_path, body, forward, shape)
    candidate, rec = _draft(problem, tmp_path)
    assert pattern in rec.plan.summary, rec.plan.summary
    torch.manual_seed(4)
    _same(problem, candidate, [torch.randn(shape)])


@pytest.mark.parametrize("name, others", [
    ("conv3d_stride_padding_dilation", ((3, 3, 6, 5, 9), (1, 3, 3, 4, 5))),
    ("transpose2d_grouped_asymmetric", ((3, 4, 4, 3), (1, 4, 2, 7))),
    ("transpose1d_dilated", ((1, 3, 14),)),
])
def test_the_draft_is_general_over_batch_and_spatial_size(name, others, tmp_path):
    body, forward, shape, _ = VARIANTS[name]
    problem = _problem(tmp_path, body, forward, shape)
    candidate, _ = _draft(problem, tmp_path)
    torch.manual_seed(5)
    for other in others:
        _same(problem, candidate, [torch.randn(other)])


def test_the_last_configuration_of_a_transposed_3d_conv_is_correct_too(tmp_path):
    body, forward, shape, _ = VARIANTS["transpose3d_scale_relu"]
    problem = _problem(tmp_path, body, forward, shape)
    configs = search.space(recognize(problem).plan)
    assert configs[-1]["precision"] == "ieee" and not configs[-1].get("direct")
    candidate, _ = _draft(problem, tmp_path, configs[-1])
    torch.manual_seed(6)
    _same(problem, candidate, [torch.randn(shape)])


def test_float32_dots_are_ieee_or_tf32x3_and_the_space_starts_with_the_right_kernel(tmp_path):
    """Only a forward depthwise convolution goes direct; a strided transposed one starts with the
    stride-phase kernel, the plain gather after it."""
    for name, (body, forward, shape, _) in VARIANTS.items():
        configs = search.space(recognize(_problem(tmp_path, body, forward, shape)).plan)
        assert configs and all(c["precision"] in PRECISIONS for c in configs), name
        assert {c["precision"] for c in configs if not c.get("direct")} == set(PRECISIONS), name
        assert any(c.get("direct") for c in configs) == (name == "conv3d_depthwise"), name
        transposed = name.startswith("transpose")  # each with a stride above 1
        assert bool(configs[0].get("phases")) == transposed and any(not c.get("phases") for c in configs), name


@pytest.mark.parametrize("body, forward, shape, reason", [
    ("        self.conv = nn.ConvTranspose3d(2, 4, 3)\n", "F.max_pool3d(self.conv(x), 2)", (1, 2, 3, 3, 3),
     "a max_pool3d with the convolution"),
    ("        self.conv = nn.Conv3d(2, 4, 3)\n        self.up = nn.ConvTranspose3d(4, 2, 2, stride=2)\n",
     "self.up(self.conv(x))", (1, 2, 4, 4, 4), "2 convolutions in one forward"),
])
def test_what_is_still_declined_says_why(body, forward, shape, reason, tmp_path):
    rec = recognize(_problem(tmp_path, body, forward, shape))
    assert rec.plan is None
    assert reason in rec.reason and "\n" not in rec.reason


@pytest.mark.parametrize("body, shape", [
    ("        self.conv = nn.ConvTranspose2d(8, 16, 3, stride=2, padding=1, output_padding=1)", (1, 8, 3, 4)),
    ("        self.conv = nn.Conv3d(8, 16, 3, stride=(1, 2, 1), padding=1)", (2, 8, 3, 4, 5)),
], ids=["conv_transpose2d", "conv3d"])
def test_a_float16_draft_uses_the_native_dot(body, shape, tmp_path):
    problem = _problem(tmp_path, body + ".half()\n", "torch.relu(self.conv(x))", shape)
    problem.write_text(problem.read_text().replace(f"torch.randn{shape!r}", f"torch.randn{shape!r}.half()"))
    candidate, rec = _draft(problem, tmp_path)
    source = Path(candidate.__file__).read_text()
    assert "input_precision" not in source and "precision" not in search.space(rec.plan)[0]
    ref = load_module(problem)
    torch.manual_seed(3)
    reference = ref.Model()
    torch.manual_seed(3)
    ours = candidate.ModelNew()
    torch.manual_seed(8)
    x = torch.randn(shape).half()
    with torch.no_grad():
        expected, got = reference(x), ours(x)
    assert got.dtype == torch.float16 and got.shape == expected.shape
    torch.testing.assert_close(got, expected, rtol=2e-3, atol=2e-3)  # float16 output, float32 accumulation


@pytest.mark.parametrize("body, forward, shape, kind", [
    ("        self.conv = nn.Conv3d(2, 4, 3, padding=1)\n", "torch.softmax(self.conv(x), dim=1)", (2, 2, 3, 4, 5),
     "colwise"),
    ("        self.conv = nn.ConvTranspose3d(3, 4, 3, stride=2, padding=1)\n        self.norm = nn.GroupNorm(2, 4)\n",
     "self.norm(self.conv(x))", (1, 3, 2, 3, 3), "rowwise"),
], ids=["conv3d_softmax", "conv_transpose3d_group_norm"])
def test_a_reduction_after_a_3d_or_transposed_conv_goes_through_conv_reduce(body, forward, shape, kind, tmp_path):
    problem = _problem(tmp_path, body, forward, shape)
    candidate = _draft_reduced(problem, tmp_path, kind)
    torch.manual_seed(9)
    _same(problem, candidate, [torch.randn(shape)])
