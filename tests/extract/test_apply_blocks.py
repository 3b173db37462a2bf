"""extract -> batch (the built-in policy) -> apply on the CPU for the other two standard blocks of
tests/extract/models.py: the transformer block (its two identical layer norms, one problem) and the
ResNet basic block (its two identical batch norms, one problem). Identical modules are merged
whatever the profile says; whether the attention core is one problem or its Linears are depends on
the CPU profile's shares (on a loaded CI machine they were), so it is not the module replaced here.
The recipe must patch a fresh instance of the model, whose state dict still loads, and the patched
model must compute what the original does."""
from __future__ import annotations

import contextlib
import copy
import io
import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from agent.cli import main
from agent.cli.exit_codes import EXIT_OK
from agent.extract.recipe import load_recipe

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]

CASES = {  # name -> (model, shape, --filter of the problem optimized, module paths it replaces, class replaced)
    "block": ("Block", "4x128x64", "LayerNorm", ["ln1", "ln2"], "LayerNorm"),
    "resnet": ("BasicBlock", "4x32x16x16:float32", "BatchNorm2d", ["bn1", "bn2"], "BatchNorm2d"),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_a_block_is_extracted_optimized_and_applied(tmp_path, name):
    cls, shape, only, paths, replaced = CASES[name]
    model = f"{HERE}/models.py:{cls}"
    extracted, workspace = tmp_path / "extracted", tmp_path / "ws"
    # one intra-op thread, as tests/extract/test_extract.py: on an oversubscribed machine a small op's
    # wait for a descheduled pool thread reads as a large share and regroups the block (a batch norm
    # was once not extracted on its own: StopIteration below); the grouping is tested, not the scheduling
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        with contextlib.redirect_stdout(io.StringIO()):
            assert main(["extract", model, "--shape", shape, "--out", str(extracted), "--min-share", "0",
                         "--device", "cpu"]) == EXIT_OK
    finally:
        torch.set_num_threads(threads)
    manifest = json.loads((extracted / "manifest.json").read_text())
    problem = next(p for p in manifest["problems"] if p["cls"].endswith(replaced))
    batch = subprocess.run([sys.executable, "-m", "agent.cli", "batch", str(extracted), "--model", "builtin",
                            "--max-attempts", "1", "--filter", only, "--out", str(tmp_path / "run"),
                            "--workspace", str(workspace)], cwd=ROOT, capture_output=True, text=True, timeout=240)
    assert batch.returncode == EXIT_OK, batch.stderr
    assert json.loads(batch.stdout.splitlines()[-1])["correct"] == 1

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = main(["apply", model, "--shape", shape, "--from", str(extracted), "--workspace", str(workspace),
                     "--device", "cpu"])
    text = out.getvalue()
    assert code == EXIT_OK, text
    assert f"+ {', '.join(paths)}: ModelNew of {problem['file']} (attempt 1, not timed)" in text
    assert "check: within the float64-judged bound" in text and "kept (no workspace for" in text

    sys.path.insert(0, str(HERE))
    import models

    torch.manual_seed(0)
    original = getattr(models, cls)().eval()
    patched = load_recipe(extracted / "applied" / "ratchet_patch.py")(copy.deepcopy(original))
    assert all(type(patched.get_submodule(p)).__name__ == "ModelNew" for p in paths)
    assert list(patched.state_dict()) == list(original.state_dict())  # a checkpoint still loads
    patched.load_state_dict(original.state_dict())
    x = torch.randn(*(int(s) for s in shape.split(":")[0].split("x")))
    with torch.no_grad():
        torch.testing.assert_close(patched(x), original(x), rtol=1e-4, atol=1e-4)
