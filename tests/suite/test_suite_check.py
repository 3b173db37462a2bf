"""`ratchet suite check`: planted degenerate problems are flagged, a healthy one is not."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from agent.cli import main
from agent.suite.check import degeneracy_flags
from agent.suite.duplicates import near_duplicates

SUITE = Path(__file__).parents[1] / "rl_problems" / "suite"

pytestmark = pytest.mark.timeout(180)


def test_planted_problems_are_flagged(capsys):
    code = main(["suite", "check", str(SUITE), "--json", "--jobs", "2"])
    reports = {r["name"]: r for r in map(json.loads, capsys.readouterr().out.splitlines())}
    assert code == 1

    def kinds(name: str, severity: str = "error") -> set[str]:
        return {f["kind"] for f in reports[name]["flags"] if f["severity"] == severity}

    assert kinds("constant_zero.py") == {"constant-output"}
    assert kinds("identity_clone.py") == {"identity"}
    assert kinds("ignores_input.py") == {"input-independent"}
    # degenerate on the problem's own inputs only: a warning (the shifted trials still test it)
    assert not kinds("clamp_unit_rand.py") and kinds("clamp_unit_rand.py", "warning") == {"identity"}
    # an identity on its own and shifted inputs (both non-negative), not on signed ones, which
    # test the negative half: a warning
    assert not kinds("relu_nonnegative.py") and kinds("relu_nonnegative.py", "warning") == {"identity"}
    for name, other in (("softplus_scale.py", "softplus_scale_copy.py"), ("softplus_scale_copy.py", "softplus_scale.py")):
        flags = [f for f in reports[name]["flags"] if f["kind"] == "near-duplicate"]
        assert len(flags) == 1 and other in flags[0]["detail"] and "numeric constants" in flags[0]["detail"]
        assert not kinds(name)
    healthy = reports["healthy_tanh_mul.py"]
    assert not healthy["flagged"] and healthy["status"] == "checked"
    # no timing verdict on the CPU: the report says it cannot be judged
    assert [f["kind"] for f in healthy["flags"]] == ["timing-unjudged"] and "cannot judge" in healthy["flags"][0]["detail"]
    assert reports["helpers.py"]["status"] == "skipped" and not reports["helpers.py"]["flagged"]
    flagged = {name for name, r in reports.items() if r["flagged"]}
    assert flagged == {"constant_zero.py", "relu_nonnegative.py", "identity_clone.py", "ignores_input.py",
                       "clamp_unit_rand.py", "softplus_scale.py", "softplus_scale_copy.py"}


def test_the_table_and_usage_errors(capsys, tmp_path):
    (tmp_path / "ok.py").write_text((SUITE / "healthy_tanh_mul.py").read_text())
    assert main(["suite", "check", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "ok.py" in out and "0 of 1 problem(s) flagged" in out and "cannot judge" in out
    assert main(["suite", "check", str(tmp_path / "missing")]) == 2


def test_near_duplicates_need_the_same_operations():
    base = "import torch\nclass Model(torch.nn.Module):\n    def forward(self, x):\n        return torch.relu(x)\n" \
           "def get_inputs():\n    return [torch.randn(4)]\n"
    renamed = base.replace("x", "inp").replace("class Model", "# a comment\nclass Model")
    other_op = base.replace("relu", "sigmoid")
    pairs = {(a, b): kind for a, b, kind, _, _ in near_duplicates({"a": base, "b": renamed, "c": other_op})}
    assert pairs == {("a", "b"): "duplicate"}


def test_degeneracy_on_one_distribution_only_is_a_warning():
    x = [torch.rand(16) for _ in range(3)]
    shifted = [torch.randn(16) for _ in range(3)]
    draws = {"problem": [(t.clone(), [t]) for t in x], "shifted": [(t.relu(), [t]) for t in shifted]}
    flags = degeneracy_flags(draws)
    assert [(f.kind, f.severity) for f in flags] == [("identity", "warning")]
    draws["shifted"] = [(t.clone(), [t]) for t in shifted]
    assert [(f.kind, f.severity) for f in degeneracy_flags(draws)] == [("identity", "error")]
    # the signed trials still test it (ReLU of non-negative inputs, an identity on the first two)
    draws["signed:0"] = [(t.relu(), [t]) for t in shifted]
    draws["shifted"] = [(t.clone(), [t]) for t in shifted]
    draws["problem"] = [(t.clone(), [t]) for t in x]
    (flag,) = degeneracy_flags(draws)
    assert (flag.kind, flag.severity) == ("identity", "warning") and "not on signed ones" in flag.detail


@pytest.mark.gpu
def test_tiny_problems_are_too_fast_on_a_gpu():
    from agent.suite.check import check_problem

    report = check_problem(SUITE / "healthy_tanh_mul.py", device="cuda:0", min_eager_ms=1.0)
    assert report.eager_ms is not None and [f.kind for f in report.flags] == ["too-fast"]
