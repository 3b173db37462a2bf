"""Honest Triton candidates are accepted, on every kind of problem the contract names:
elementwise, a row reduction, a matrix product with tl.dot, a module with parameters, integer
inputs, a tuple output, scalar and tuple init arguments, a user's module picked with --entry.
"""
from __future__ import annotations

import pytest

from helpers_eval import assert_ok, evaluator, source


@pytest.fixture(scope="module")
def cache_dir(tmp_path_factory):
    return tmp_path_factory.mktemp("ratchet-cache")


@pytest.fixture(scope="module")
def evaluators(cache_dir):
    """One Evaluator per (problem, entry), made when first needed, closed with the module."""
    made = {}

    def get(problem, entry):
        if (problem, entry) not in made:
            made[problem, entry] = evaluator(problem, cache_dir, entry=entry)
        return made[problem, entry]

    yield get
    for ev in made.values():
        ev.close()


# (problem, candidate, entry, compute ops the candidate leaves to torch)
HONEST = [
    ("elementwise", "elementwise_ok", "Model", []),  # scalar init argument, two inputs
    ("elementwise", "elementwise_stdlib_ok", "Model", []),  # dataclass, NamedTuple, enum, namedtuple
    ("elementwise", "aligned_vector_ok", "Model", []),  # data_ptr() read only to test alignment
    ("elementwise", "dunder_all_ok", "Model", []),  # a module-level __all__
    ("elementwise", "autotuned_ok", "Model", []),  # @triton.autotune: every config runs on the CPU
    ("row_softmax", "row_softmax_ok", "Model", []),  # a row reduction; a single-op problem
    ("matmul", "matmul_ok", "Model", []),  # tl.dot in a single-op matmul problem
    ("linear_relu", "linear_relu_ok", "Model", []),  # parameters: the same seed, the same weights
    ("cross_entropy", "cross_entropy_ok", "Model", ["aten::mean"]),  # int64 class indices; the mean left to torch
    ("clamp_rowmax", "clamp_rowmax_ok", "Model", []),  # tuple output; a tuple init argument
    ("user_module", "elementwise_ok", "GatedResidual", []),  # a user's module, --entry
]


@pytest.mark.parametrize("problem,candidate,entry,left_to_torch", HONEST, ids=[f"{p}-{c}" for p, c, _, _ in HONEST])
def test_honest_candidate_is_accepted(evaluators, problem, candidate, entry, left_to_torch):
    ev = evaluators(problem, entry)
    result = ev.evaluate(source(candidate))
    info = ev.problem.to_dict()
    assert_ok(result)
    DESCRIBED.get(problem, lambda info: None)(info)
    assert result.torch_ops == left_to_torch
    names = [c.name for c in result.checks]
    assert names[:3] == ["parse", "guard", "build"]
    assert "kernel-launched" in names
    # both distributions were used where the problem allows them
    assert "trial-0:problem" in names and "trial-1:shifted" in names
    assert result.phases["correctness"] > 0 and result.phases["total"] >= result.phases["correctness"]
    assert result.source_hash and result.problem_hash


def _cross_entropy(info):
    """Integer inputs keep their domain; a 0-dim output; a multi-op problem is not single-op."""
    logits, targets = info["inputs"]
    assert logits == {"kind": "tensor", "shape": [16, 32], "dtype": "float32"}
    assert targets["dtype"] == "int64" and 0 <= targets["min"] <= targets["max"] < 32
    assert info["outputs"] == [{"kind": "tensor", "shape": [], "dtype": "float32"}]
    assert info["single_op"] is None


def _clamp_rowmax(info):
    assert [o["shape"] for o in info["outputs"]] == [[8, 128], [8]]
    assert info["init_args"][1]["kind"] == "tuple"


def _row_softmax(info):
    assert info["single_op"] == "aten::_softmax"


# what the reference worker reports about some problems (ProblemInfo.to_dict())
DESCRIBED = {"cross_entropy": _cross_entropy, "clamp_rowmax": _clamp_rowmax, "row_softmax": _row_softmax}
