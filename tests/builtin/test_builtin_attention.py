"""The built-in policy's attention plan (agent.builtin.attention, agent.builtin.attention_match):
each form KernelBench writes - F.scaled_dot_product_attention with and without is_causal and an
explicit scale, the written-out softmax(q kᵀ * scale) v with a causal mask built from tril or
triu, 3-d inputs - is recognized as one fused flash-attention kernel that runs in Triton's
interpreter against the reference, at sizes that are not multiples of its blocks and head dims
that are not powers of two; the same draft at another batch size, sequence length and head dim; what is
not fused is declined with a reason; float32 configurations never use plain TF32."""
from __future__ import annotations

import re
from pathlib import Path

import pytest
import torch

from agent.builtin import codegen, configs, search
from agent.builtin.recognize import recognize
from tools.judge.compare import tolerance_for
from helpers_builtin import declined, draft_outputs, load_module

pytestmark = pytest.mark.timeout(240)

SDPA = "F.scaled_dot_product_attention(q, k, v{})"
WRITTEN = ("t = q.size(-2)\n        att = (q @ k.transpose(-2, -1)) {scale}\n{mask}"
           "        return torch.softmax(att, dim=-1) @ v")
TRIL = ("        mask = torch.tril(torch.ones(t, t, device=q.device)).view(1, 1, t, t)\n"
        "        att = att.masked_fill(mask == 0, float('-inf'))\n")
TRIU = ("        mask = torch.triu(torch.ones(t, t, device=q.device, dtype=torch.bool), diagonal=1)\n"
        "        att = att.masked_fill(mask, float('-inf'))\n")
Q4 = "torch.randn(2, 3, 40, 16)"
# name -> (forward body, q, k, v, a word of the plan's summary)
FORMS = {
    "sdpa": ("return " + SDPA.format(""), Q4, Q4, Q4, "attention softmax(q kᵀ * 0.25)"),
    "sdpa_causal_d24": ("return " + SDPA.format(", is_causal=True"), "torch.randn(2, 3, 40, 24)",
                        "torch.randn(2, 3, 40, 24)", "torch.randn(2, 3, 40, 24)", "causal attention"),
    "sdpa_scale": ("return " + SDPA.format(", scale=0.3"), Q4, Q4, Q4, "q kᵀ * 0.3)"),
    "sdpa_3d": ("return " + SDPA.format(""), "torch.randn(3, 37, 16)", "torch.randn(3, 37, 16)",
                "torch.randn(3, 37, 24)", "v 3x37x24"),
    "sdpa_causal_shorter_q": ("return " + SDPA.format(", is_causal=True"), "torch.randn(2, 3, 24, 16)", Q4, Q4,
                              "causal attention"),
    "written": (WRITTEN.format(scale="* (1.0 / math.sqrt(k.size(-1)))", mask=""), Q4, Q4, Q4, "* 0.25)"),
    "written_causal_div": (WRITTEN.format(scale="/ math.sqrt(k.size(-1))", mask=TRIL), Q4, Q4, Q4, "causal"),
    "written_causal_triu": (WRITTEN.format(scale="* 0.2", mask=TRIU), Q4, Q4, Q4, "causal"),
    "sdpa_heads_merged": ("b, t, c = q.shape\n"
                          "        q, k, v = (x.view(b, t, 3, c // 3).transpose(1, 2) for x in (q, k, v))\n"
                          "        return F.scaled_dot_product_attention(q, k, v).transpose(1, 2).reshape(b, t, c)",
                          "torch.randn(2, 40, 48)", "torch.randn(2, 40, 48)", "torch.randn(2, 40, 48)", "2x3x40x16"),
    "written_where_causal": ("t = q.size(-2)\n"
                             "        keep = torch.tril(torch.ones(t, t, dtype=torch.bool, device=q.device))\n"
                             "        att = torch.where(keep, q @ k.transpose(-2, -1) * 0.25, float('-inf'))\n"
                             "        return torch.softmax(att, dim=-1) @ v", Q4, Q4, Q4, "causal"),
    "written_causal_fill_1e9": ("t = q.size(-2)\n"
                                "        keep = torch.tril(torch.ones(t, t, dtype=torch.bool, device=q.device))\n"
                                "        att = (q @ k.transpose(-2, -1) * 0.25).masked_fill(~keep, -1e9)\n"
                                "        return torch.softmax(att, dim=-1) @ v", Q4, Q4, Q4, "causal"),
    "sdpa_fp16": ("return " + SDPA.format(", is_causal=True"), "torch.randn(2, 3, 40, 16, dtype=torch.float16)",
                  "torch.randn(2, 3, 40, 16, dtype=torch.float16)", "torch.randn(2, 3, 40, 16, dtype=torch.float16)",
                  "causal"),
}


@pytest.fixture(autouse=True)
def interpreter(monkeypatch):
    monkeypatch.setenv("TRITON_INTERPRET", "1")


def _problem(tmp_path: Path, name: str, body: str, q: str, k: str, v: str) -> Path:
    path = tmp_path / f"{name}.py"
    path.write_text("import math\n\nimport torch\nimport torch.nn as nn\nimport torch.nn.functional as F\n\n\n"
                    "class Model(nn.Module):\n    def __init__(self):\n        super().__init__()\n"
                    "        self.register_buffer('bias', torch.tril(torch.ones(40, 40)) > 0)\n\n"
                    f"    def forward(self, q, k, v):\n        {body}\n\n\n"
                    f"def get_inputs():\n    return [{q}, {k}, {v}]\n\n\ndef get_init_inputs():\n    return []\n")
    return path


def _check(path: Path, source: str, tmp_path: Path) -> None:
    expected, got = draft_outputs(path, source, tmp_path)
    assert got.shape == expected.shape and got.dtype == expected.dtype
    tol = tolerance_for(expected.dtype)
    rms = expected.float().pow(2).mean().sqrt().item() or 1.0
    if expected.dtype == torch.float32:  # IEEE / 3xTF32: 10x tighter than the evaluator's tolerance
        torch.testing.assert_close(got, expected, rtol=tol.rtol / 10, atol=tol.atol * rms / 10)
    else:
        torch.testing.assert_close(got, expected, rtol=tol.rtol, atol=tol.atol * rms)


@pytest.mark.parametrize("name", sorted(FORMS))
def test_each_attention_form_is_one_fused_kernel_and_correct(name, tmp_path):
    body, q, k, v, words = FORMS[name]
    path = _problem(tmp_path, name, body, q, k, v)
    rec = recognize(path)
    assert rec.plan is not None, rec.reason
    assert rec.plan.kind == "attention" and words in rec.plan.summary, rec.plan.summary
    space = search.space(rec.plan)
    source = codegen.draft(rec.plan, rec.problem, space[0])
    assert source.count("@triton.jit") == 1 and "tl.exp2" in source
    _check(path, source, tmp_path)
    if name in ("sdpa", "written_causal_div"):  # other blocks (40 rows: a multiple of neither) and precision
        other = {**space[0], "BLOCK_M": 32, "BLOCK_N": 16, "precision": "ieee"}
        _check(path, codegen.draft(rec.plan, rec.problem, other), tmp_path)


def test_the_draft_is_correct_at_another_batch_size_and_sequence_length(tmp_path):
    body, q, k, v, _ = FORMS["written_causal_div"]
    path = _problem(tmp_path, "general", body, q, k, v)
    rec = recognize(path)
    assert rec.plan is not None, rec.reason
    candidate = tmp_path / "general_candidate.py"
    candidate.write_text(codegen.draft(rec.plan, rec.problem, search.space(rec.plan)[0]))
    ref, ours = load_module(path).Model(), load_module(candidate).ModelNew()
    torch.manual_seed(5)
    for shape in ((3, 3, 21, 16), (1, 3, 70, 16), (2, 3, 21, 9)):  # and another head dim (1/sqrt(d) at run time)
        xs = [torch.randn(shape) for _ in range(3)]
        torch.testing.assert_close(ours(*xs), ref(*xs), rtol=1e-5, atol=1e-5)


def test_a_head_dim_equal_to_the_batch_or_past_another_power_of_two_is_read_at_run_time(tmp_path):
    """Batch and head dim both 16 are two sizes (their positions differ), and a head dim that takes
    another power of two of blocks keeps the tile budget of the draft's: the draft fixes neither."""
    body = FORMS["written"][0]
    path = _problem(tmp_path, "tied", body, *["torch.randn(16, 37, 16)"] * 3)
    rec = recognize(path)
    assert rec.plan is not None, rec.reason
    source = codegen.draft(rec.plan, rec.problem, search.space(rec.plan)[0])
    checked = re.findall(r"expected = \((.*)\)", source)
    assert checked and not any(re.search(r"\b\d+\b", shape) for shape in checked), checked  # every size an input's
    candidate = tmp_path / "tied_candidate.py"
    candidate.write_text(source)
    ref, ours = load_module(path).Model(), load_module(candidate).ModelNew()
    torch.manual_seed(6)
    for shape in ((5, 37, 16), (16, 21, 40), (3, 21, 9)):
        xs = [torch.randn(shape) for _ in range(3)]
        torch.testing.assert_close(ours(*xs), ref(*xs), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("body, q, words", [
    ("return F.scaled_dot_product_attention(q, k, v, attn_mask=k[:, :, :, :1] > 0)", Q4,
     "aten.gt on the attention mask"),
    ("return F.scaled_dot_product_attention(q, k, v, dropout_p=0.5)", Q4, "dropout"),
    ("return F.scaled_dot_product_attention(torch.relu(q), k, v)", Q4, "elementwise work before the attention"),
    ("return F.scaled_dot_product_attention(q, k, v) * 2.0", Q4, "after the attention"),
    ("t = q.size(-2)\n        keep = torch.tril(torch.ones(t, t, device=q.device))\n"
     "        att = (q @ k.transpose(-2, -1)).masked_fill(keep == 0, -1e4) * 0.001\n"
     "        return torch.softmax(att, dim=-1) @ v", Q4, "a fill that does not drop the scores"),
    ("return torch.softmax((q @ k.transpose(-2, -1)).masked_fill(self.bias == 0, -1e9), dim=-1) @ v", Q4,
     "a mask tensor filling with -1e+09"),
    ("return F.scaled_dot_product_attention(q, k[:, :1], v[:, :1], enable_gqa=True)", Q4, "broadcast"),
])
def test_what_attention_does_not_fuse_is_declined_with_a_reason(body, q, words, tmp_path):
    rec = recognize(_problem(tmp_path, "declined", body, q, q, q))
    reason = declined(rec)  # the fallback drafts it (or keeps eager): the attention family's reason is named
    assert words in reason and "\n" not in reason, reason


MASKED = {  # name -> (forward, mask input, a word of the summary); the mask read in the kernel, broadcast by strides
    "sdpa_bool_mask": ("F.scaled_dot_product_attention(q, k, v, attn_mask=mask)", "torch.rand(40, 40) > 0.3",
                       "mask != 0 kept"),
    "sdpa_float_mask": ("F.scaled_dot_product_attention(q, k, v, attn_mask=mask)", "torch.randn(2, 1, 40, 40)",
                        "+ mask"),
    "written_masked_fill": ("torch.softmax((q @ k.transpose(-2, -1) / 4.0).masked_fill(mask == 0, float('-inf')), "
                            "dim=-1) @ v", "(torch.rand(3, 40, 40) > 0.5).float() + torch.eye(40)", "mask != 0 kept"),
}


@pytest.mark.parametrize("name", sorted(MASKED))
def test_a_mask_tensor_is_read_in_the_kernel(name, tmp_path):
    forward, mask, words = MASKED[name]
    path = tmp_path / f"{name}.py"
    path.write_text("import torch\nimport torch.nn as nn\nimport torch.nn.functional as F\n\n\n"
                    "class Model(nn.Module):\n    def forward(self, q, k, v, mask):\n"
                    f"        return {forward}\n\n\n"
                    f"def get_inputs():\n    return [{Q4}, {Q4}, {Q4}, {mask}]\n\n\n"
                    "def get_init_inputs():\n    return []\n")
    rec = recognize(path)
    assert rec.plan is not None, rec.reason
    assert rec.plan.kind == "attention" and words in rec.plan.summary, rec.plan.summary
    _check(path, codegen.draft(rec.plan, rec.problem, search.space(rec.plan)[0]), tmp_path)


def test_mingpt_as_written_heads_split_a_buffer_mask_heads_merged(tmp_path):
    path = Path(__file__).parents[1] / "builtin_problems" / "attention_mingpt.py"
    rec = recognize(path)
    assert rec.plan is not None, rec.reason
    assert "q 2x3x40x16" in rec.plan.summary and "mask != 0 kept" in rec.plan.summary, rec.plan.summary
    source = codegen.draft(rec.plan, rec.problem, search.space(rec.plan)[0])
    _check(path, source, tmp_path)
    # another model: width, head count and mask length from the constructor, the sequence as long as
    # the mask (its slice then traces as the whole buffer)
    candidate = tmp_path / "mingpt_candidate.py"
    candidate.write_text(source)
    ref, ours = load_module(path).Model(60, 5, 21), load_module(candidate).ModelNew(60, 5, 21)
    torch.manual_seed(7)
    xs = [torch.randn(3, 21, 60) for _ in range(3)]
    torch.testing.assert_close(ours(*xs), ref(*xs), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("name", ["sdpa", "sdpa_causal_d24", "written_causal_div"])
def test_every_float32_configuration_is_ieee_or_3xtf32_and_the_draft_says_so(name, tmp_path):
    body, q, k, v, _ = FORMS[name]
    rec = recognize(_problem(tmp_path, name, body, q, k, v))
    space = search.space(rec.plan)
    assert space and {c["precision"] for c in space} == {"ieee", "tf32x3"}
    for config in space[:1] + space[-1:]:
        source = codegen.draft(rec.plan, rec.problem, config)
        assert f'input_precision="{config["precision"]}"' in source and 'input_precision="tf32"' not in source
        assert f"precision={config['precision']}" in source.split('"""')[1]  # the module docstring
    rec.plan.precision = "tf32"  # a --precision tf32 run: its baselines use TF32, so may its dots
    first = search.space(rec.plan)[0]
    assert first["precision"] == "tf32"
    assert 'input_precision="tf32"' in codegen.draft(rec.plan, rec.problem, first)


def test_kernelbench_sized_attention_fills_the_gpu_within_shared_memory(tmp_path):
    big = "torch.randn(32, 32, 512, 64)"
    rec = recognize(_problem(tmp_path, "kb", "return " + SDPA.format(""), big, big, big))
    first = search.space(rec.plan)[0]
    assert 32 * 32 * (512 // first["BLOCK_M"]) >= configs.SMS
    long = "torch.randn(2, 8, 4096, 128)"
    rec = recognize(_problem(tmp_path, "long", "return " + SDPA.format(", is_causal=True"), long, long, long))
    for config in search.space(rec.plan):
        bm, bn, s = config["BLOCK_M"], config["BLOCK_N"], config["num_stages"]
        assert (bm * 128 + s * bn * 256) * 4 <= configs.SMEM_BYTES
