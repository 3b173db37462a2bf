"""extract -> batch (the built-in policy) -> apply, on the CPU: the MLP's GELU modules (three,
one problem) optimized in a batch of one attempt, put back into the model by `ratchet apply`,
whose recipe patches a model instance whose state dict still loads; the same in bfloat16
(--precision bf16), where only a kernel judged under bf16 is put in."""
from __future__ import annotations

import contextlib
import copy
import io
import json
import subprocess
import sys
from pathlib import Path

import torch

from agent.cli import main
from agent.cli.exit_codes import EXIT_OK, EXIT_USAGE
from agent.extract.recipe import load_recipe

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
MODEL = f"{HERE}/models.py:make_mlp"
INPUTS = f"{HERE}/models.py:mlp_inputs"


def test_extract_batch_apply_end_to_end(tmp_path):
    extracted, workspace = tmp_path / "extracted", tmp_path / "ws"
    with contextlib.redirect_stdout(io.StringIO()):
        assert main(["extract", MODEL, "--inputs", INPUTS, "--out", str(extracted), "--min-share", "0",
                     "--device", "cpu"]) == EXIT_OK
    manifest = json.loads((extracted / "manifest.json").read_text())
    gelu = next(p for p in manifest["problems"] if p["cls"].endswith("GELU"))
    batch = subprocess.run([sys.executable, "-m", "agent.cli", "batch", str(extracted), "--model", "builtin",
                            "--max-attempts", "1", "--filter", "GELU", "--out", str(tmp_path / "run"),
                            "--workspace", str(workspace)], cwd=ROOT, capture_output=True, text=True, timeout=240)
    assert batch.returncode == EXIT_OK, batch.stderr
    assert json.loads(batch.stdout.splitlines()[-1])["correct"] == 1

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = main(["apply", MODEL, "--inputs", INPUTS, "--from", str(extracted), "--workspace", str(workspace),
                     "--device", "cpu"])
    text = out.getvalue()
    assert code == EXIT_OK, text
    assert f"+ 1, 3, 5: ModelNew of {gelu['file']} (attempt 1, not timed)" in text
    assert "- 1, 3, 5: torch.nn.modules.activation.GELU" in text
    assert "check: within the float64-judged bound" in text and "not timed: no GPU" in text
    assert "kept (no workspace" in text  # the Linear problems were not optimized: left as they are
    applied = extracted / "applied"
    assert (applied / "summary.md").read_text().strip() == text.strip()

    sys.path.insert(0, str(HERE))
    from models import make_mlp, mlp_inputs

    original = make_mlp().eval()
    patched = load_recipe(applied / "ratchet_patch.py")(copy.deepcopy(original))
    assert [type(patched[i]).__name__ for i in (1, 3, 5)] == ["ModelNew"] * 3
    assert type(patched[0]).__name__ == "Linear"
    assert list(patched.state_dict()) == list(original.state_dict())  # a checkpoint of the model still loads
    patched.load_state_dict(original.state_dict())
    x = mlp_inputs()[0]
    with torch.no_grad():
        torch.testing.assert_close(patched(x), original(x), rtol=1e-4, atol=1e-4)

    # the model in bfloat16: the kernel judged in float32 is not put in; one judged under bf16 is
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = main(["apply", MODEL, "--inputs", INPUTS, "--from", str(extracted), "--workspace", str(workspace),
                     "--device", "cpu", "--precision", "bf16", "--out", str(tmp_path / "not-applied")])
    assert code == EXIT_OK and "attempt 1 was judged under fp32, not bf16" in out.getvalue(), out.getvalue()
    half = tmp_path / "ws-bf16"
    batch = subprocess.run([sys.executable, "-m", "agent.cli", "batch", str(extracted), "--model", "builtin",
                            "--max-attempts", "1", "--filter", "GELU", "--out", str(tmp_path / "run-bf16"),
                            "--workspace", str(half), "--precision", "bf16"], cwd=ROOT, capture_output=True, text=True,
                           timeout=240)
    assert batch.returncode == EXIT_OK, batch.stderr
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = main(["apply", MODEL, "--inputs", INPUTS, "--from", str(extracted), "--workspace", str(half),
                     "--device", "cpu", "--precision", "bf16", "--out", str(tmp_path / "applied-bf16")])
    text = out.getvalue()
    assert code == EXIT_OK, text
    assert "(precision bf16)" in text and f"+ 1, 3, 5: ModelNew of {gelu['file']}" in text
    assert "check: within the float64-judged bound" in text


def test_apply_without_an_extraction_is_a_usage_error(tmp_path, capsys):
    assert main(["apply", MODEL, "--inputs", INPUTS, "--from", str(tmp_path)]) == EXIT_USAGE
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--from" in err and "manifest.json" in err
