"""The built-in policy's reductions after a convolution (agent.builtin.conv_reduce): the conv kernel
writes its output (with its elementwise epilogue) in float32, a rowwise or colwise kernel reduces
it. Each level-2 chain - GroupNorm (+ a per-channel scale; + swish, a scale and a residual of the
convolution's output, computed on the grouped view), InstanceNorm (+ a division), softmax over
channels, a global mean over the spatial dims, min/max and logsumexp over channels, a conv1d with
GroupNorm, the conv's value read before and after a ReLU - drafted and run in Triton's interpreter
beside the reference on tiny shapes; one draft at other batch and spatial sizes; the
configurations (conv tiles with tf32x3 then ieee, then the reduction's); what is still declined,
with the message."""
from __future__ import annotations

import itertools
from pathlib import Path

import pytest
import torch

from agent.builtin import codegen, search
from tools.precision import dot_precision
from agent.builtin.conv_reduce import PREFIX
from agent.builtin.recognize import recognize
from helpers_builtin import load_module, one_input_problem

PRECISIONS = dot_precision("fp32")  # the default run's float32 dots: tf32x3, then ieee; never plain tf32

pytestmark = pytest.mark.timeout(240)
_MADE = itertools.count()


@pytest.fixture(autouse=True)
def interpreter(monkeypatch):
    monkeypatch.setenv("TRITON_INTERPRET", "1")


def _problem(tmp_path: Path, body: str, forward: str, shape: tuple[int, ...]) -> Path:
    return one_input_problem(tmp_path, "conv_reduce", body, forward, shape)


def _draft(problem: Path, tmp_path: Path, kind: str, config: dict | None = None):
    rec = recognize(problem)
    assert rec.plan is not None, rec.reason
    assert rec.plan.kind == "conv_reduce" and f"then {kind}:" in rec.plan.summary, rec.plan.summary
    source = codegen.draft(rec.plan, rec.problem, config or search.space(rec.plan)[0])
    path = tmp_path / f"{problem.stem}_candidate_{next(_MADE)}.py"
    path.write_text(source)
    return load_module(path)


def _same(problem: Path, candidate, inputs: list[torch.Tensor]) -> None:
    ref = load_module(problem)
    torch.manual_seed(3)
    reference = ref.Model()
    torch.manual_seed(3)
    ours = candidate.ModelNew()
    with torch.no_grad():
        expected, got = reference(*inputs), ours(*inputs)
    assert got.dtype == expected.dtype and got.shape == expected.shape
    torch.testing.assert_close(got, expected, rtol=1e-4, atol=1e-4)


CONV = "        self.conv = nn.Conv2d(3, 6, 3)\n"
# name -> (constructor body, forward, input shape, the reduction stage's kind)
CHAINS = {
    "group_norm_scale": ("        self.conv = nn.Conv2d(3, 8, 3)\n        self.gn = nn.GroupNorm(4, 8)\n"
                         "        self.scale = nn.Parameter(torch.randn(8, 1, 1))",
                         "self.gn(self.conv(x)) * self.scale", (2, 3, 7, 7), "rowwise"),
    "group_norm_swish_residual": ("        self.conv = nn.Conv2d(3, 8, 3)\n        self.gn = nn.GroupNorm(4, 8)\n"
                                  "        self.scale = nn.Parameter(torch.randn(8, 1, 1))",
                                  "torch.tanh((z := self.gn(y := self.conv(x))) * torch.sigmoid(z) * self.scale) + y",
                                  (2, 3, 7, 7), "rowwise"),
    "instance_norm_divide": ("        self.conv = nn.Conv2d(3, 6, 3, padding=1)\n"
                             "        self.norm = nn.InstanceNorm2d(6)",
                             "self.norm(self.conv(x)) / 2.0", (2, 3, 6, 6), "rowwise"),
    "relu_softmax_channels": (CONV + "        self.bias = nn.Parameter(torch.randn(6, 1, 1))",
                              "torch.softmax(torch.relu(self.conv(x)), dim=1) * 2.0 + self.bias", (2, 3, 7, 7),
                              "colwise"),
    "relu_global_mean": (CONV, "torch.relu(self.conv(x)).mean(dim=(2, 3))", (2, 3, 7, 7), "rowwise"),
    "adaptive_avg_pool_keepdim": (CONV, "F.adaptive_avg_pool2d(self.conv(x) * 0.5, 1) + 1.0", (2, 3, 7, 7),
                                  "rowwise"),
    "min_channels_tanh": (CONV, "torch.tanh(torch.tanh(torch.min(self.conv(x), dim=1, keepdim=True)[0]))",
                          (2, 3, 7, 7), "colwise"),
    "read_before_and_after_relu": (CONV, "torch.relu(y := self.conv(x) * 2.0).sum(dim=1) + y.amax(dim=1)",
                                   (2, 3, 7, 7), "colwise"),  # the conv stage ends before the relu
    "max_channels": (CONV, "torch.amax(self.conv(x), dim=1) - 1.0", (2, 3, 7, 7), "colwise"),
    "logsumexp_channels": (CONV, "torch.relu(torch.logsumexp(self.conv(x) * 2.0, dim=1, keepdim=True))",
                           (2, 3, 7, 7), "colwise"),
    "conv1d_group_norm": ("        self.conv = nn.Conv1d(3, 8, 3)\n        self.gn = nn.GroupNorm(2, 8)",
                          "torch.sigmoid(self.gn(self.conv(x)))", (2, 3, 11), "rowwise"),
}


@pytest.mark.parametrize("name", sorted(CHAINS))
def test_each_chain_matches_the_reference(name, tmp_path):
    body, forward, shape, kind = CHAINS[name]
    problem = _problem(tmp_path, body, forward, shape)
    candidate = _draft(problem, tmp_path, kind)
    torch.manual_seed(4)
    _same(problem, candidate, [torch.randn(shape)])


def test_the_draft_is_general_over_batch_and_spatial_size(tmp_path):
    body, forward, shape, kind = CHAINS["group_norm_scale"]
    problem = _problem(tmp_path, body, forward, shape)
    candidate = _draft(problem, tmp_path, kind)
    source = Path(candidate.__file__).read_text()
    assert "conv_out.shape[2]" in source and "conv_out.shape[3]" in source  # row widths from the run-time shape
    torch.manual_seed(5)
    for other in ((3, 3, 9, 9), (1, 3, 6, 10)):
        _same(problem, candidate, [torch.randn(other)])


def test_configurations_vary_the_conv_then_the_reduction(tmp_path):
    body, forward, shape, kind = CHAINS["relu_global_mean"]
    problem = _problem(tmp_path, body, forward, shape)
    configs = search.space(recognize(problem).plan)
    conv_keys = [{k: v for k, v in c.items() if k.startswith(PREFIX)} for c in configs]
    reduce_keys = [{k: v for k, v in c.items() if not k.startswith(PREFIX)} for c in configs]
    assert {c[f"{PREFIX}precision"] for c in configs} == set(PRECISIONS)  # tf32x3, then ieee; never tf32
    assert conv_keys[0][f"{PREFIX}precision"] == "tf32x3"
    varied = [i for i in range(len(configs)) if reduce_keys[i] != reduce_keys[0]]
    assert varied and all(conv_keys[i] == conv_keys[0] for i in varied)  # the reduction's, with the conv's default
    assert len({tuple(sorted(c.items())) for c in conv_keys}) > 2
    torch.manual_seed(6)
    x = torch.randn(shape)
    for config in (configs[len(conv_keys) // 2], configs[varied[-1]]):  # an ieee conv; a varied reduction
        _same(problem, _draft(problem, tmp_path, kind, config), [x])


def test_what_is_still_declined_says_why_in_one_line(tmp_path):
    rec = recognize(_problem(tmp_path, CONV, "self.conv(x).sum(dim=(1, 3))", (2, 3, 6, 6)))
    assert rec.plan is None
    assert "a reduction over non-adjacent dims" in rec.reason and "\n" not in rec.reason


def test_what_this_family_declines_the_fallback_may_draft_saying_why(tmp_path):
    """A mean after a group norm: this family declines it; the fallback calls the norm through torch
    and takes the mean over three adjacent dims in a reduction kernel of its own
    (tests/builtin/test_builtin_fallback_reduce.py)."""
    rec = recognize(_problem(tmp_path, "        self.conv = nn.Conv2d(3, 8, 3)\n        self.gn = nn.GroupNorm(4, 8)",
                             "self.gn(self.conv(x)).mean(dim=(1, 2, 3))", (2, 3, 6, 6)))
    assert rec.plan is not None and rec.plan.kind == "fallback", rec.reason
    assert "reductions over different shapes or dimensions" in rec.plan.summary and "mean by reduction kernels" in \
        rec.plan.summary, rec.plan.summary
