"""The built-in policy drafts drop-in modules: each drafted ModelNew computes the reference's function
for what a user varies, or refuses it with one clear ValueError, never garbage.

For every problem the policy recognizes in tests/builtin_problems/ and the bundled example, the
first configuration's draft is imported here and run (Triton's interpreter, CPU) against the
problem's Model, both built after the same seed as the evaluator does, on:

- own: the problem's own inputs and constructor arguments;
- smaller: the module-level int sizes (ints and tuples of ints, such as `batch_size`) set to a
  smaller odd value `(v // 2) | 1` before get_inputs(); a problem with none gets its batch (dim 0
  of the first input, and of every input of the same dim 0) shrunk so instead;
- scaled: every float constructor argument times 0.75.

Outputs are compared with the evaluator's tolerances (tools.judge.compare). REFUSED names the drafts
that refuse a case, by design (a size the kernel is specialized to); every other case must match.
"""
from __future__ import annotations

import importlib.util
import io
import itertools
import math
import tokenize
from pathlib import Path

import pytest
import torch

from agent.builtin import codegen, search
from agent.builtin.recognize import recognize
from tools.judge.compare import tolerance_for

HERE = Path(__file__).parents[1]
PROBLEMS = HERE / "builtin_problems"
EXAMPLE = HERE.parent / "examples" / "swish_problem.py"
CASES = {p.name: p for p in sorted(PROBLEMS.glob("*.py")) if p.name != "sort_rows.py"} | {EXAMPLE.name: EXAMPLE}
VARIATIONS = ("own", "smaller", "scaled")
REFUSED: dict[str, set[str]] = {}  # problem -> variations its draft refuses (none do: see the test's docstring)
pytestmark = pytest.mark.timeout(300)
_LOADED = itertools.count()


@pytest.fixture(autouse=True)
def interpreter(monkeypatch):
    monkeypatch.setenv("TRITON_INTERPRET", "1")


def _import(path: Path):
    spec = importlib.util.spec_from_file_location(f"general_{path.stem}_{next(_LOADED)}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _smaller(v: int) -> int:
    return (v // 2) | 1 if v > 1 else v


def _shrink_module_sizes(module) -> bool:
    """Set the module-level int sizes to a smaller odd value; whether there were any."""
    found = False
    for name, value in list(vars(module).items()):
        if name.startswith("_"):
            continue
        if type(value) is int and value > 1:
            setattr(module, name, _smaller(value))
            found = True
        elif isinstance(value, tuple) and value and all(type(v) is int for v in value):
            setattr(module, name, tuple(_smaller(v) for v in value))
            found = True
    return found


def _setting(path: Path, variation: str):
    """(reference module, constructor arguments, inputs) for a variation."""
    ref = _import(path)
    shrink_dim0 = variation == "smaller" and not _shrink_module_sizes(ref)
    init = list(ref.get_init_inputs())
    if variation == "scaled":
        init = [v * 0.75 if type(v) is float else v for v in init]
    torch.manual_seed(4)
    inputs = list(ref.get_inputs())
    if shrink_dim0:  # the batch: dim 0 of the first input, and of every input sharing it
        batch = inputs[0].shape[0]
        inputs = [t[:_smaller(batch)].clone() if isinstance(t, torch.Tensor) and t.dim() and t.shape[0] == batch else t
                  for t in inputs]
    return ref, init, inputs


def _draft(path: Path) -> tuple[str, object]:
    rec = recognize(path)
    assert rec.plan is not None, rec.reason
    return codegen.draft(rec.plan, rec.problem, search.space(rec.plan)[0]), rec


def _run(path: Path, candidate, variation: str):
    """('ok', None) when ModelNew matches Model, ('refused', message) when it raised ValueError."""
    ref, init, inputs = _setting(path, variation)
    torch.manual_seed(3)
    reference = ref.Model(*init)
    torch.manual_seed(3)
    ours = candidate.ModelNew(*init)
    with torch.no_grad():
        expected = reference(*inputs)
        try:
            got = ours(*inputs)
        except ValueError as exc:
            return "refused", str(exc)
    assert type(got) is torch.Tensor and got.shape == expected.shape and got.dtype == expected.dtype
    tol = tolerance_for(expected.dtype)
    rms = expected.float().pow(2).mean().sqrt().item() or 1.0
    torch.testing.assert_close(got.float(), expected.float(), rtol=tol.rtol, atol=tol.atol * rms)
    return "ok", None


@pytest.mark.parametrize("name", sorted(CASES))
def test_the_draft_computes_the_reference_for_what_a_user_varies(name, tmp_path):
    path = CASES[name]
    source, _ = _draft(path)
    candidate_file = tmp_path / f"{path.stem}_candidate.py"
    candidate_file.write_text(source)
    candidate = _import(candidate_file)
    for variation in VARIATIONS:
        outcome, message = _run(path, candidate, variation)
        if variation in REFUSED.get(name, set()):
            assert outcome == "refused", f"{name} ({variation}) was expected to refuse"
            assert "\n" not in message and "shape" in message, message
        else:
            assert outcome == "ok", f"{name} ({variation}): {message}"


def test_what_the_kernel_is_specialized_to_is_refused_with_the_shape(tmp_path):
    """The RMS norm's draft holds a whole row in one tile of 128: a wider row takes the next power of
    two as its tile (200: 256), one wider than the largest tile is refused, and so are another rank
    and a weight that does not match the rows."""
    source, _ = _draft(PROBLEMS / "rmsnorm.py")
    candidate_file = tmp_path / "rmsnorm_candidate.py"
    candidate_file.write_text(source)
    candidate = _import(candidate_file)
    torch.manual_seed(3)
    reference = _import(PROBLEMS / "rmsnorm.py").Model(96)
    torch.manual_seed(3)
    ours = candidate.ModelNew(96)
    x = torch.randn(5, 96)
    torch.testing.assert_close(ours(x), reference(x).detach())
    torch.manual_seed(3)
    wide_reference = _import(PROBLEMS / "rmsnorm.py").Model(200)
    torch.manual_seed(3)
    wide = candidate.ModelNew(200)
    x = torch.randn(5, 200)
    torch.testing.assert_close(wide(x), wide_reference(x).detach())
    with pytest.raises(ValueError, match="a row .* of 20000 elements is wider than this kernel's largest tile of 16384"):
        candidate.ModelNew(20000)(torch.randn(2, 20000))
    with pytest.raises(ValueError, match="x has 3 dims; this drafted kernel takes 2"):
        candidate.ModelNew(128)(torch.randn(2, 5, 128))
    with pytest.raises(ValueError, match="x is torch.float16; this drafted kernel takes torch.float32"):
        candidate.ModelNew(128)(torch.randn(5, 128, dtype=torch.float16))
    with pytest.raises(ValueError, match=r"self.weight has shape \(64,\); this drafted kernel handles \(128,\)"):
        candidate.ModelNew(64)(torch.randn(5, 128))


def test_an_attribute_the_kernel_bakes_in_is_refused(tmp_path):
    """mid_mean reduces over `self.dim` (1): the kernel is drafted for that dim, and says so."""
    source, rec = _draft(PROBLEMS / "mid_mean.py")
    assert [f.expr for f in rec.problem.variants.fixed] == ["self.dim"]
    candidate_file = tmp_path / "mid_mean_candidate.py"
    candidate_file.write_text(source)
    with pytest.raises(ValueError, match="self.dim is 2; this drafted kernel computes with 1 only"):
        _import(candidate_file).ModelNew(2)(torch.randn(4, 32, 48))


def _compare(path: Path, candidate, init: list, inputs: list) -> None:
    ref = _import(path)
    torch.manual_seed(3)
    reference = ref.Model(*init)
    torch.manual_seed(3)
    ours = candidate.ModelNew(*init)
    with torch.no_grad():
        expected, got = reference(*inputs), ours(*inputs)
    tol = tolerance_for(expected.dtype)
    rms = expected.float().pow(2).mean().sqrt().item() or 1.0
    torch.testing.assert_close(got.float(), expected.float(), rtol=tol.rtol, atol=tol.atol * rms)


def test_sizes_equal_by_coincidence_vary_apart_and_layouts_do_not_matter(tmp_path):
    """H == W == 8 in the problem; the draft takes H != W, a non-contiguous input, another
    out_features (a constructor size no input shares) and another K."""
    candidates = {}
    for name in ("bias_tanh_fp16.py", "linear_gelu.py", "bmm_scale.py"):
        source, _ = _draft(PROBLEMS / name)
        (tmp_path / name).write_text(source)
        candidates[name] = _import(tmp_path / name)
    torch.manual_seed(5)
    _compare(PROBLEMS / "bias_tanh_fp16.py", candidates["bias_tanh_fp16.py"], [4],
             [torch.randn(3, 4, 5, 7, dtype=torch.float16)])
    _compare(PROBLEMS / "bias_tanh_fp16.py", candidates["bias_tanh_fp16.py"], [4],
             [torch.randn(3, 7, 5, 4, dtype=torch.float16).transpose(1, 3)])
    _compare(PROBLEMS / "linear_gelu.py", candidates["linear_gelu.py"], [48, 24, 2.0], [torch.randn(3, 7, 48)])
    _compare(PROBLEMS / "linear_gelu.py", candidates["linear_gelu.py"], [40, 40, -1.0],
             [torch.randn(2, 40, 5).transpose(1, 2)])
    _compare(PROBLEMS / "bmm_scale.py", candidates["bmm_scale.py"], [],
             [torch.randn(2, 9, 13), torch.randn(2, 13, 11), torch.randn(2, 9, 11)])


def test_a_square_linear_layer_takes_other_batches_and_out_features(tmp_path):
    """batch == in_features == out_features == 32 in the problem: each still varies on its own."""
    problem = tmp_path / "square_linear.py"
    problem.write_text((PROBLEMS / "linear_gelu.py").read_text()
                       .replace("torch.randn(2, 5, 48)", "torch.randn(32, 32)").replace("[48, 40, 2.0]", "[32, 32, 2.0]"))
    source, _ = _draft(problem)
    (tmp_path / "square_candidate.py").write_text(source)
    candidate = _import(tmp_path / "square_candidate.py")
    torch.manual_seed(5)
    _compare(problem, candidate, [32, 16, 0.5], [torch.randn(7, 32)])
    _compare(problem, candidate, [24, 40, 1.0], [torch.randn(9, 24)])


def test_a_size_that_makes_another_familys_plan_is_fixed_not_a_failed_trace(tmp_path):
    """Linear(256, 10) at batch 64 is a GEMM; traced with more out_features it is a GEMV plan, whose
    template reads configuration keys the GEMM's does not have. That size is fixed (refused with the
    shape), not a failed trace ("KeyError: 'SPLIT_K'", found on a problem `ratchet extract` wrote);
    the batch stays free."""
    problem = tmp_path / "linear_to_ten.py"
    problem.write_text("import torch\nimport torch.nn as nn\n\n\nclass Model(nn.Module):\n"
                       "    def __init__(self, arg0, arg1):\n        super().__init__()\n"
                       "        self.module = nn.Linear(arg0, arg1)\n\n    def forward(self, x0):\n"
                       "        return self.module(x0)\n\n\ndef get_inputs():\n    return [torch.randn(64, 256)]\n\n\n"
                       "def get_init_inputs():\n    return [256, 10]\n")
    source, rec = _draft(problem)
    assert rec.plan.kind == "matmul"
    assert {c.name: c.plan.kind for c in rec.problem.variants.classes}["arg1_size"] == "gemv"
    (tmp_path / "ten_candidate.py").write_text(source)
    candidate = _import(tmp_path / "ten_candidate.py")
    torch.manual_seed(5)
    _compare(problem, candidate, [256, 10], [torch.randn(17, 256)])
    with pytest.raises(ValueError, match="shape"):
        candidate.ModelNew(256, 12)(torch.randn(64, 256))


def test_module_scalars_are_kernel_parameters_not_literals():
    source, rec = _draft(EXAMPLE)
    assert [s.expr for s in rec.problem.variants.scalars] == ["float(self.scale)"]
    kernel = source.split("class ModelNew")[0]
    assert "2.0" not in kernel and "scalar_0" in kernel
    assert "float(self.scale)" in source.split("def forward")[1]


@pytest.mark.parametrize("name", sorted(CASES))
def test_the_draft_holds_no_literal_of_the_input_shapes_or_element_counts(name):
    """The inputs' shapes and element counts are read at run time; a number equal to an element
    count may only be a tuning choice (a block size of the configuration)."""
    path = CASES[name]
    source, rec = _draft(path)
    config = search.space(rec.plan)[0]
    numbers = {int(t.string) for t in tokenize.generate_tokens(io.StringIO(source).readline)
               if t.type == tokenize.NUMBER and t.string.isdigit()}
    for i, shape in enumerate(rec.problem.variants.shapes):
        if i in rec.problem.variants.numbers:  # a number given to forward has no shape
            continue
        if len(shape) > 1:
            assert ", ".join(map(str, shape)) not in source, (name, shape)
        count = math.prod(shape)
        assert count not in numbers - {v for v in config.values() if type(v) is int}, (name, count)


def test_a_number_given_to_forward_is_read_at_run_time_or_refused(tmp_path):
    """KernelBench's L1 5 gives forward a tensor and a Python float: the draft passes the float to
    its kernel at run time, so another value computes the reference's function; an int exponent the
    kernel bakes in is refused in one line; a tensor in a number's place too."""
    for name in ("scalar_input_mul.py", "scalar_input_softmax.py"):
        source, rec = _draft(PROBLEMS / name)
        (tmp_path / name).write_text(source)
        candidate = _import(tmp_path / name)
        torch.manual_seed(6)
        if name == "scalar_input_mul.py":
            assert [s.expr for s in rec.problem.variants.scalars] == ["float(s)"]
            for s in (3.14, -0.5, 2):
                _compare(PROBLEMS / name, candidate, [], [torch.rand(9, 33), s])
            with pytest.raises(ValueError, match="s is a Tensor; this drafted kernel takes a number"):
                candidate.ModelNew()(torch.rand(4, 4), torch.tensor(2.0))
        else:
            assert [s.expr for s in rec.problem.variants.scalars] == ["float(temperature)"]
            assert [(f.expr, f.value) for f in rec.problem.variants.fixed] == [("power", 2)]
            for t in (0.7, 1.9):
                _compare(PROBLEMS / name, candidate, [], [torch.randn(5, 96), t, 2])
            with pytest.raises(ValueError, match="power is 3; this drafted kernel computes with 2 only"):
                candidate.ModelNew()(torch.randn(5, 96), 0.7, 3)
