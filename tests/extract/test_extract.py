"""`ratchet extract` on three small models built from standard blocks (tests/extract/models.py):
the manifest (shares, coverage, module paths), identical modules merged with a count, and the
problem files self-contained, loadable as problems and judged by `ratchet eval` as they are."""
from __future__ import annotations

import contextlib
import io
import json
import subprocess
import sys
from pathlib import Path

import pytest

from agent.cli import main
from agent.cli.exit_codes import EXIT_OK, EXIT_REJECTED
from tools.problem import read_problem

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path.insert(0, str(HERE))
from passthrough import passthrough  # noqa: E402

MODELS = {  # name -> (MODEL, input options)
    "mlp": (f"{HERE}/models.py:make_mlp", ["--inputs", f"{HERE}/models.py:mlp_inputs", "--min-share", "0"]),
    "block": (f"{HERE}/models.py:Block", ["--shape", "2x512x64", "--min-share", "0"]),  # long rows: the attention core is most of attn
    "resnet": (f"{HERE}/models.py:BasicBlock", ["--shape", "4x32x16x16:float32", "--min-share", "0"]),
}


@pytest.fixture(scope="module")
def extracted(tmp_path_factory) -> dict[str, tuple[Path, dict, str]]:
    """name -> (out dir, manifest, stdout): the three extractions, in this process (agent.cli.main, as
    the command runs it; the real command as a process: tests/extract/test_extract_errors.py)."""
    import torch

    root = tmp_path_factory.mktemp("extract")
    done = {}
    # one intra-op thread: on an oversubscribed machine (CI's 3 test workers on 2 cores) a relu's
    # wait for a descheduled pool thread read as 10% of the ResNet block, which was then extracted
    # whole (no Conv2d); what is tested here is the grouping, not the host's scheduling
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        for name, (model, inputs) in MODELS.items():
            with contextlib.redirect_stdout(io.StringIO()) as stdout:
                assert main(["extract", model, *inputs, "--out", str(root / name), "--device", "cpu"]) == EXIT_OK
            done[name] = (root / name, json.loads((root / name / "manifest.json").read_text()), stdout.getvalue())
    finally:
        torch.set_num_threads(threads)
    return done


@pytest.mark.parametrize("name", sorted(MODELS))
def test_the_manifest_ranks_shares_that_sum_to_at_most_one(extracted, name):
    out, manifest, stdout = extracted[name]
    problems = manifest["problems"]
    assert problems and manifest["device"] == "cpu" and manifest["timer"] == "cpu" and manifest["total_ms"] > 0
    shares = [p["share"] for p in problems]
    assert shares == sorted(shares, reverse=True) and all(0 < s <= 1 for s in shares)
    assert abs(sum(shares) - manifest["coverage"]) < 1e-4 and manifest["coverage"] <= 1 + 1e-6
    modules = [m for p in problems for m in p["modules"]]
    assert len(modules) == len(set(modules)) and all(p["count"] == len(p["modules"]) for p in problems)
    assert sorted(p["file"] for p in problems) == sorted(f.name for f in out.glob("*.py"))
    assert [p["file"] for p in problems] == sorted(p["file"] for p in problems)  # natural order is share order
    assert f"covered by {len(problems)} problem(s)" in stdout


def by_class(manifest: dict) -> dict[str, list[dict]]:
    found: dict[str, list[dict]] = {}
    for p in manifest["problems"]:
        found.setdefault(p["cls"].rsplit(".", 1)[-1], []).append(p)
    return found


def test_identical_modules_are_one_problem_with_a_count(extracted):
    mlp = by_class(extracted["mlp"][1])
    assert [(p["modules"], p["count"]) for p in mlp["GELU"]] == [(["1", "3", "5"], 3)]
    linears = {tuple(p["init_args"]): p for p in mlp["Linear"]}
    assert linears[("256", "256")]["modules"] == ["2", "4"]  # the same class, arguments and input shapes
    assert linears[("64", "256")]["count"] == linears[("256", "10")]["count"] == 1  # others stay apart
    assert linears[("64", "256")]["inputs"] == [{"shape": [64, 64], "dtype": "float32"}]
    block = by_class(extracted["block"][1])
    assert block["LayerNorm"][0]["modules"] == ["ln1", "ln2"]
    resnet = by_class(extracted["resnet"][1])
    assert resnet["Conv2d"][0]["modules"] == ["conv1", "conv2"] and resnet["BatchNorm2d"][0]["count"] == 2


def test_a_composite_whose_own_code_computes_is_extracted_whole(extracted):
    """The attention core (matmuls, softmax) is in SelfAttention's own forward: it is one problem,
    its class copied into the file, and its Linear children are not problems of their own."""
    out, manifest, _ = extracted["block"]
    attention = by_class(manifest)["SelfAttention"][0]
    assert attention["modules"] == ["attn"] and attention["init_args"] == ["64", "4"]
    modules = {m for p in manifest["problems"] for m in p["modules"]}
    assert not modules & {"attn.qkv", "attn.proj", "(model)"}
    source = (out / attention["file"]).read_text()
    assert "class SelfAttention(nn.Module):" in source and "HEAD_DIM = 16" in source and "import math" in source
    assert "models" not in source.split('"""', 2)[2]  # nothing of the user's module is imported


@pytest.mark.parametrize("name", sorted(MODELS))
def test_problem_files_are_valid_problems(extracted, name):
    out, manifest, _ = extracted[name]
    for p in manifest["problems"]:
        read_problem(out / p["file"])  # the static contract
        namespace: dict = {}
        exec(compile((out / p["file"]).read_text(), p["file"], "exec"), namespace)
        model = namespace["Model"](*namespace["get_init_inputs"]())
        inputs = namespace["get_inputs"]()
        assert [list(x.shape) for x in inputs] == [i["shape"] for i in p["inputs"]]
        assert not model.training
        model(*inputs)


def test_ratchet_eval_judges_an_extracted_problem_as_it_is(extracted, tmp_path):
    """A pass-through ModelNew with one small Triton kernel (a copy of the output) is ok; without
    a kernel of its own it is rejected (the guard rule own-kernel), as any candidate is."""
    out, manifest, _ = extracted["block"]
    problem = out / by_class(manifest)["SelfAttention"][0]["file"]
    for kernel, code, line in ((True, EXIT_OK, "ok"), (False, EXIT_REJECTED, "rejected")):
        candidate = tmp_path / f"candidate_{kernel}.py"
        candidate.write_text(passthrough(problem.read_text(), kernel))
        proc = subprocess.run([sys.executable, "-m", "agent.cli", "eval", str(problem), str(candidate), "--device", "cpu"],
                              cwd=ROOT, capture_output=True, text=True, timeout=240)
        assert proc.returncode == code, proc.stdout + proc.stderr
        assert proc.stdout.splitlines()[0] == f"{candidate.name}: {line}"
        if not kernel:
            assert "own-kernel" in proc.stdout
