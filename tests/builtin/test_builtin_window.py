"""The built-in policy's window kinds (agent.builtin.pooling, scans, argreduce), drafted and run in
Triton's interpreter against the reference: every variant of each template (1-3 d max and average
pooling with dilation, ceil_mode, count_include_pad, divisor_override and an epilogue; forward,
reverse, exclusive, masked scans along the last and a middle dim, cumsum and cumprod;
argmax/argmin along the last and a middle dim), PyTorch's edge semantics (the first index on
ties, NaN as the extreme, NaN through max pooling), settings read from the module at run time,
and what is declined, with the message."""
from __future__ import annotations

import importlib.util
import itertools
from pathlib import Path

import pytest
import torch

from helpers_builtin import declined

from agent.builtin import codegen, search
from agent.builtin.recognize import recognize

HERE = Path(__file__).parents[1]
PROBLEMS = HERE / "builtin_problems"
pytestmark = pytest.mark.timeout(240)
_LOADED = itertools.count()

# problem -> configurations beyond the first to run (the first runs in tests/builtin/test_builtin.py)
VARIANTS = {
    "max_pool1d.py": 1, "max_pool3d.py": 1, "avg_pool1d.py": 1, "avg_pool2d_scaled.py": 2,
    "avg_pool3d_functional.py": 1, "cumsum.py": 1, "cumprod_mid.py": 2, "cumsum_reverse.py": 2,
    "cumsum_exclusive.py": 1, "cumsum_masked.py": 1, "argmax_mid.py": 1, "argmin_rows.py": 1,
}


@pytest.fixture(autouse=True)
def interpreter(monkeypatch):
    monkeypatch.setenv("TRITON_INTERPRET", "1")


def _import(path: Path):
    spec = importlib.util.spec_from_file_location(f"window_{path.stem}_{next(_LOADED)}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _candidate(problem: Path, tmp_path: Path, config: dict | None = None):
    rec = recognize(problem)
    assert rec.plan is not None, rec.reason
    source = codegen.draft(rec.plan, rec.problem, config or search.space(rec.plan)[0])
    path = tmp_path / f"{problem.stem}_{abs(hash(source))}.py"
    path.write_text(source)
    return _import(path), rec


def _problem(tmp_path: Path, name: str, forward: str, inputs: str, init: str = "", args: str = "",
             body: str = "") -> Path:
    path = tmp_path / f"{name}.py"
    path.write_text(f"import torch\nimport torch.nn as nn\nimport torch.nn.functional as F\n\n\n"
                    f"class Model(nn.Module):\n    def __init__(self{args}):\n        super().__init__()\n{body}\n"
                    f"    def forward(self, x):\n        return {forward}\n\n\n"
                    f"def get_inputs():\n    return [{inputs}]\n\n\ndef get_init_inputs():\n    return [{init}]\n")
    return path


def _same(problem: Path, candidate, init: list, inputs: list, exact: bool = False) -> None:
    ref = _import(problem)
    torch.manual_seed(3)
    reference = ref.Model(*init)
    torch.manual_seed(3)
    ours = candidate.ModelNew(*init)
    with torch.no_grad():
        expected, got = reference(*inputs), ours(*inputs)
    assert got.dtype == expected.dtype and got.shape == expected.shape
    if exact:
        assert torch.equal(got, expected), (got != expected).sum()
    else:
        torch.testing.assert_close(got.float(), expected.float(), rtol=1e-4, atol=1e-4, equal_nan=True)


@pytest.mark.parametrize("name", sorted(VARIANTS))
def test_other_configurations_of_each_variant_are_correct(name, tmp_path):
    rec = recognize(PROBLEMS / name)
    ref = _import(PROBLEMS / name)
    for config in search.space(rec.plan)[1:1 + VARIANTS[name]]:
        candidate, _ = _candidate(PROBLEMS / name, tmp_path, config)
        torch.manual_seed(4)
        _same(PROBLEMS / name, candidate, ref.get_init_inputs(), ref.get_inputs(), exact=rec.plan.kind == "argreduce")


def test_arg_reductions_take_the_first_index_on_ties_and_nan_as_the_extreme(tmp_path):
    """Integer-valued inputs (many ties), NaNs, all -inf and all +inf: the indices equal torch's exactly;
    the indices of max(dim) are an argmax too."""
    problem = _problem(tmp_path, "max_indices", "torch.max(x, dim=1)[1]", "torch.randn(2, 40, 5)")
    for path, shape in ((problem, (2, 40, 5)), (PROBLEMS / "argmax_mid.py", (2, 33, 10)),
                        (PROBLEMS / "argmin_rows.py", (3, 300))):
        candidate, rec = _candidate(path, tmp_path)
        assert rec.plan.kind == "argreduce" and rec.plan.out_dtype == "torch.int64"
        init = _import(path).get_init_inputs()
        torch.manual_seed(0)
        ties = torch.randint(-2, 3, shape).float()
        nans = ties.clone()
        nans.view(-1)[::7] = float("nan")
        for x in (ties, nans, torch.full(shape, float("-inf")), torch.full(shape, float("inf"))):
            _same(path, candidate, init, [x], exact=True)


def test_max_pooling_propagates_nan_and_reads_the_module_settings_at_run_time(tmp_path):
    """The draft reads kernel size, stride, padding and dilation from self.maxpool: a module built
    with other settings than the traced ones computes them, never refuses."""
    candidate, rec = _candidate(PROBLEMS / "max_pool1d.py", tmp_path)
    assert "self.maxpool.kernel_size" in candidate.__loader__.get_source(candidate.__name__)
    torch.manual_seed(5)
    x = torch.randn(2, 3, 31)
    x[0, 1, 7] = float("nan")
    for init in ([4, 1, 2, 3], [3, 2, 1, 1], [5, 3, 0, 2], [2, 1, 1, 1]):
        _same(PROBLEMS / "max_pool1d.py", candidate, init, [x])


def test_average_pooling_follows_count_include_pad_ceil_mode_and_divisor(tmp_path):
    base = _problem(tmp_path, "avg2d", "self.pool(x)", "torch.randn(2, 3, 13, 10)",
                    "3, 2, 1, True, False, None", ", k, s, p, ceil, cip, div",
                    "        self.pool = nn.AvgPool2d(k, s, p, ceil_mode=ceil, count_include_pad=cip, divisor_override=div)\n")
    candidate, _ = _candidate(base, tmp_path)
    torch.manual_seed(6)
    x = torch.randn(2, 3, 13, 10)
    for init in ([3, 2, 1, True, False, None], [3, 2, 1, False, True, None], [4, 3, 2, True, True, None],
                 [2, 2, 0, False, True, 3], [(3, 2), (2, 1), (1, 0), True, False, None]):
        _same(base, candidate, init, [x])


@pytest.mark.parametrize("forward, inputs", [
    ("F.max_pool1d(x, 3)", "torch.randn(2, 3, 20, dtype=torch.bfloat16)"),
    ("F.max_pool3d(x, 2)", "torch.randn(2, 3, 4, 6, 8, dtype=torch.float16)"),
    ("F.max_pool2d(x, 3, 2, 1)", "torch.randn(3, 11, 9)"),  # unbatched: (C, H, W)
], ids=["bf16_1d", "fp16_3d", "unbatched"])
def test_max_pooling_keeps_the_dtype_and_takes_unbatched_inputs(forward, inputs, tmp_path):
    path = _problem(tmp_path, "pool_dtype", forward, inputs)
    candidate, _ = _candidate(path, tmp_path)
    torch.manual_seed(7)
    _same(path, candidate, [], _import(path).get_inputs(), exact=True)


def test_scans_in_half_precision_and_the_exclusive_form_by_subtraction(tmp_path):
    """float16 in, float32 accumulation, float16 out; cumsum(x) - x (exclusive) is a scan with an
    elementwise epilogue reading x again; a reverse scan along a middle dim."""
    cases = [(_problem(tmp_path, "half", "torch.cumsum(x, dim=1)", "torch.randn(3, 200, dtype=torch.float16)"),
              [torch.randn(3, 200, dtype=torch.float16)], 2e-2),
             (_problem(tmp_path, "minus", "torch.cumsum(x, 1) - x", "torch.randn(4, 70)"), [torch.randn(4, 70)], 1e-4),
             (_problem(tmp_path, "reverse_mid", "x.flip(1).cumsum(1).flip(1)", "torch.randn(2, 45, 6)"),
              [torch.randn(2, 45, 6)], 1e-4)]
    for path, inputs, tol in cases:
        candidate, rec = _candidate(path, tmp_path)
        assert rec.plan.kind == "scan"
        ref = _import(path)
        with torch.no_grad():
            expected, got = ref.Model()(*inputs), candidate.ModelNew()(*inputs)
        assert got.dtype == expected.dtype
        torch.testing.assert_close(got.float(), expected.float(), rtol=tol, atol=tol * 10)


def test_zeros_put_in_front_after_a_cumsum_are_the_exclusive_scan(tmp_path):
    """The exclusive scan written as a shift (KernelBench L1 92's way: the scan of all but the last
    element, a zero in front of it) is the scan of zeros in front of the input; a prefix of the
    scanned dim first, two zeros, a middle dim. Zeros after a cumsum's result, or in front of a
    cumprod's, are not that, and stay refused."""
    shift = "torch.cat((torch.zeros_like(x.narrow(1, 0, {k})), torch.cumsum(x.narrow(1, 0, x.size(1) - {k}), 1)), 1)"
    for k, inputs in ((1, "torch.randn(6, 131)"), (2, "torch.randn(3, 40, 5)")):
        path = _problem(tmp_path, f"shift{k}", shift.format(k=k), inputs)
        candidate, rec = _candidate(path, tmp_path)
        assert rec.plan.kind == "scan" and rec.plan.summary.startswith("exclusive cumsum along dim 1"), rec.plan.summary
        torch.manual_seed(5)
        _same(path, candidate, [], [eval(inputs)])  # noqa: S307 - the test's own input expression
    for forward in ("torch.cat((torch.cumsum(x, 1), torch.zeros_like(x[:, :1])), 1)",
                    "torch.cat((torch.zeros_like(x[:, :1]), torch.cumprod(x[:, :-1], 1)), 1)"):
        rec = recognize(_problem(tmp_path, "behind", forward, "torch.randn(4, 30)"))
        assert rec.plan is None or rec.plan.kind != "scan", rec.plan.summary


@pytest.mark.parametrize("forward, words", [
    ("torch.argmax(x)", "argmax over all elements"),
    ("torch.argmax(x, 1).float() * 2.0", "work after argmax"),
    ("F.max_pool2d(torch.relu(x), 2)", "pooling of a computed value"),
    ("torch.cumsum(x, 1).flip(1)", "a flip that does not make a reverse scan"),
    ("torch.cumsum(torch.cumsum(x, 1), 1)", "2 scans in one forward"),
    ("torch.cumsum(x, 1).sum(dim=1)", "a scan together with a reduce"),
    ("torch.cat((x, x), dim=1)", "torch.cat of several computed tensors"),
    ("x.flip(1) * 2.0", "aten.flip outside a scan"),
    ("F.adaptive_avg_pool2d(x, 2)", "aten._adaptive_avg_pool2d.default has no built-in template"),
    # every op without a template is named, each once, in the forward's order (what depends on one is not looked at)
    ("torch.sort(x, 3).values + F.adaptive_avg_pool2d(x, 8) + torch.sort(x * 2.0, 3).values",
     "aten.sort.default and aten._adaptive_avg_pool2d.default have no built-in template"),
], ids=["argmax_all", "after_argmax", "pool_prologue", "lone_flip", "two_scans", "scan_reduce", "cat", "flip",
        "adaptive", "every_missing_op"])
def test_what_the_window_kinds_decline_is_named(forward, words, tmp_path):
    rec = recognize(_problem(tmp_path, "declined", forward, "torch.randn(2, 3, 8, 8)"))
    assert words in declined(rec), declined(rec)  # the fallback drafts it (or keeps eager), naming the reason
