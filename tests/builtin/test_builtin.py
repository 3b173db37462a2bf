"""The built-in offline policy, without the agent: recognition of each pattern on small problems,
the drafted kernels (run here, in Triton's interpreter, against the reference), and the search."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from agent.builtin import BuiltinPolicy, NothingRecognized, codegen, configs, search
from agent.builtin.policy import parse_config, parse_feedback
from agent.builtin.recognize import recognize
from agent.loop.render import FEEDBACK_VERDICTS, render_feedback
from tools.guard import scan as guard
from helpers_builtin import draft_outputs

HERE = Path(__file__).parents[1]
PROBLEMS = HERE / "builtin_problems"
pytestmark = pytest.mark.timeout(120)

# problem -> (template, a word of its summary)
RECOGNIZED = {
    "bias_tanh_fp16.py": ("pointwise", "tanh"),
    "layernorm.py": ("rowwise", "layer_norm"),
    "rmsnorm.py": ("rowwise", "last dim"),
    "log_softmax.py": ("rowwise", "log_softmax"),
    "wide_softmax.py": ("rowwise", "softmax"),
    "row_sum.py": ("rowwise", "reduction"),
    "misc_rows.py": ("rowwise", "dims [1, 2]"),
    "mid_mean.py": ("colwise", "dims [1]"),
    "linear_gelu.py": ("matmul", "linear"),
    "bmm_scale.py": ("matmul", "3x20x18"),
    "einsum_batched_matrix.py": ("matmul", "210x9"),
    "normalize.py": ("rowwise", "norm"),
    "channel_rmsnorm.py": ("colwise", "dims [1] of 2x24x6x10"),
    "channel_softmax.py": ("colwise", "softmax"),
    "max_pool1d.py": ("pool", "max_pool1d (kernel 4, stride 1, padding 2, dilation 3)"),
    "max_pool3d.py": ("pool", "max_pool3d (kernel 5, stride 2, padding 1)"),
    "avg_pool1d.py": ("pool", "avg_pool1d (kernel 4, stride 1, padding 2)"),
    "avg_pool2d_scaled.py": ("pool", "avg_pool2d (kernel 5, stride 2, padding 1) of 4x3x11x14 + epilogue (mul, tanh)"),
    "avg_pool3d_functional.py": ("pool", "avg_pool3d (kernel 3, stride 2, padding 1)"),
    "cumsum.py": ("scan", "cumsum along dim 1 of 4x64"),
    "cumprod_mid.py": ("scan", "cumprod along dim 1 of 3x37x20"),
    "cumsum_reverse.py": ("scan", "reverse cumsum along dim 1"),
    "cumsum_exclusive.py": ("scan", "exclusive cumsum along dim 1 of 4x71"),
    "cumsum_masked.py": ("scan", "cumsum along dim 1 of 4x90 + epilogue (mul)"),
    "argmax_mid.py": ("argreduce", "argmax over dim 1 of 2x33x10"),
    "argmin_rows.py": ("argreduce", "argmin over the last dim of 6x300"),
}


@pytest.fixture(autouse=True)
def interpreter(monkeypatch):
    monkeypatch.setenv("TRITON_INTERPRET", "1")


@pytest.mark.parametrize("name", sorted(RECOGNIZED))
def test_each_pattern_is_recognized_and_its_draft_is_correct(name, tmp_path):
    template, word = RECOGNIZED[name]
    rec = recognize(PROBLEMS / name)
    assert rec.plan is not None, rec.reason
    assert rec.plan.kind == template and word in rec.plan.summary
    source = codegen.draft(rec.plan, rec.problem, search.space(rec.plan)[0])
    assert guard.check(source).violations == []
    assert "@triton.jit" in source and "class ModelNew" in source
    expected, got = draft_outputs(PROBLEMS / name, source, tmp_path)
    assert got.shape == expected.shape and got.dtype == expected.dtype
    tol = 2e-2 if expected.dtype == torch.float16 else 1e-4
    torch.testing.assert_close(got.float(), expected.float(), rtol=tol, atol=tol)


def test_fusion_linear_bias_gelu_is_one_kernel_with_no_torch_compute():
    rec = recognize(PROBLEMS / "linear_gelu.py")
    source = codegen.draft(rec.plan, rec.problem, search.space(rec.plan)[0])
    assert source.count("@triton.jit") == 1 and "tl.dot(" in source and "GROUP_M" in source
    assert "tl.erf(" in source  # GELU in the epilogue
    forward = source.split("def forward")[1]
    assert "F.gelu" not in forward and "torch.matmul" not in forward and ".linear(" not in forward
    assert "fused_matmul_kernel[grid]" in forward


def test_every_configuration_of_the_looped_rows_is_correct(tmp_path):
    """The wide softmax has single-pass and looped configurations: all compute the same thing
    (the looped one computes max and sum of exponentials in one pass: online softmax)."""
    rec = recognize(PROBLEMS / "wide_softmax.py")
    configs = search.space(rec.plan)
    assert any(c["looped"] for c in configs) and any(not c["looped"] for c in configs)
    for config in [c for c in configs if c["looped"]][:2] + [configs[0]]:
        source = codegen.draft(rec.plan, rec.problem, config)
        assert source.count("for r0 in range") == (2 if config["looped"] else 0)  # online: max and sum together
        expected, got = draft_outputs(PROBLEMS / "wide_softmax.py", source, tmp_path)
        torch.testing.assert_close(got, expected, rtol=1e-4, atol=1e-6)


def test_a_permute_that_moves_only_ones_is_a_reshape_and_a_transpose_is_not(tmp_path):
    """After a product, a permute moving only dims of size 1 keeps the elements' order (a reshape:
    a product family's, correct); one that swaps two real dims is a transpose, left to the fallback."""
    def problem(name: str, forward: str) -> Path:
        path = tmp_path / f"{name}.py"
        path.write_text("import torch\nimport torch.nn as nn\n\n\nclass Model(nn.Module):\n"
                        f"    def forward(self, a, b):\n        return {forward}\n\n\n"
                        "def get_inputs():\n    return [torch.randn(6, 5), torch.randn(5, 7)]\n\n\n"
                        "def get_init_inputs():\n    return []\n")
        return path

    ones = problem("ones", "torch.relu((a @ b).unsqueeze(1).permute(1, 0, 2))")
    rec = recognize(ones)
    assert rec.plan is not None and rec.plan.kind in ("matmul", "gemv"), rec.reason
    expected, got = draft_outputs(ones, codegen.draft(rec.plan, rec.problem, search.space(rec.plan)[0]), tmp_path)
    torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-5)
    rec = recognize(problem("swap", "torch.relu((a @ b).transpose(0, 1))"))
    assert rec.plan is None or rec.plan.kind not in ("matmul", "gemv"), rec.plan.summary
    assert rec.plan is None or "(a transpose) of a computed value" in rec.plan.summary


def test_unrecognized_problems_say_why():
    """What nothing drafts says why in one line: two values returned; and (kept eager) a forward of
    library ops only, which the fallback family would only call through torch (a sort)."""
    for path, words, kept in ((PROBLEMS / "sort_rows.py", "aten.sort", True),
                              (HERE / "problems" / "clamp_rowmax.py", "2 values", False)):
        rec = recognize(path)
        assert rec.plan is None and words in rec.reason, rec.reason
        assert "\n" not in rec.reason and rec.kept_eager is kept
        policy = BuiltinPolicy(path)
        assert policy.unrecognized and "nothing attempted" in policy.unrecognized and policy.kept_eager is kept
        assert ("kept eager" in policy.unrecognized) is kept
        with pytest.raises(NothingRecognized):
            policy.complete([], [])


def test_an_op_returning_a_tuple_keeps_its_values_dtype(tmp_path):
    """max(dim) and layer norm return tuples: a float16 input gives a float16 output, as the evaluator checks."""
    for name, forward in (("max_dim", "torch.max(x, dim=1)[0]"), ("layer_norm", "F.layer_norm(x, (64,))")):
        problem = tmp_path / f"{name}.py"
        problem.write_text("import torch\nimport torch.nn as nn\nimport torch.nn.functional as F\n\n\n"
                           "class Model(nn.Module):\n    def forward(self, x):\n        return " + forward + "\n\n\n"
                           "def get_inputs():\n    return [torch.randn(4, 64, dtype=torch.float16)]\n\n\n"
                           "def get_init_inputs():\n    return []\n")
        rec = recognize(problem)
        assert rec.plan is not None and rec.plan.out_dtype == "torch.float16", (name, rec.reason)


def test_in_place_changes_to_an_input_are_not_recognized(tmp_path):
    problem = tmp_path / "in_place.py"
    problem.write_text((PROBLEMS / "row_sum.py").read_text().replace(
        "return torch.tanh(torch.sum(x, dim=-1) * 0.1) * 0.5 + 1.0", "x.mul_(2.0)\n        return torch.relu(x)"))
    rec = recognize(problem)
    assert rec.plan is None and "in place" in rec.reason


def test_a_file_that_does_not_load_is_left_to_the_evaluator(tmp_path):
    broken = tmp_path / "broken.py"
    broken.write_text("import torch\nclass Model(torch.nn.Module):\n    pass\nraise RuntimeError('boom')\n")
    policy = BuiltinPolicy(broken)
    assert policy.plan is None and policy.unrecognized is None  # ratchet reports it as an invalid problem


# --- the search --------------------------------------------------------------------------------


def _plan(name: str):
    return recognize(PROBLEMS / name).plan


def test_search_is_deterministic_and_never_repeats():
    plan = _plan("linear_gelu.py")
    history: list[search.Outcome] = []
    seen = []
    for _ in range(6):
        config = search.next_config(plan, history)
        assert config == search.next_config(plan, list(history))  # the same history, the same answer
        assert configs.key(config) not in seen
        seen.append(configs.key(config))
        history.append(search.Outcome(config, "ok", None))
    assert len(set(seen)) == 6


def test_a_failing_configuration_goes_away_with_every_larger_one(tmp_path):
    problem = tmp_path / "very_wide_softmax.py"
    problem.write_text((PROBLEMS / "wide_softmax.py").read_text().replace("(3, 1500)", "(2, 20000)"))
    plan = recognize(problem).plan
    space = search.space(plan)
    looped = [c for c in space if c["looped"]]
    failed = sorted(looped, key=lambda c: c["BLOCK_R"])[1]
    history = [search.Outcome(failed, "compile_error")]
    left = []
    while (config := search.next_config(plan, history)) is not None:
        left.append(config)
        history.append(search.Outcome(config, "ok"))
    assert failed not in left
    assert not [c for c in left if c["looped"] and c["BLOCK_R"] >= failed["BLOCK_R"]]
    assert [c for c in left if c["looped"] and c["BLOCK_R"] < failed["BLOCK_R"]]


def test_float32_products_never_use_plain_tf32_and_an_incorrect_3xtf32_switches_to_ieee():
    for name in ("linear_gelu.py", "bmm_scale.py"):
        assert {c.get("precision") for c in search.space(_plan(name))} == {"tf32x3", "ieee"}, name
    plan = _plan("linear_gelu.py")
    first = search.next_config(plan, [])
    assert first["precision"] == "tf32x3"
    second = search.next_config(plan, [search.Outcome(first, "incorrect")])
    assert second["precision"] == "ieee"
    history = [search.Outcome(first, "incorrect")]
    while (config := search.next_config(plan, history)) is not None:
        assert config["precision"] == "ieee"
        history.append(search.Outcome(config, "ok"))


def test_timing_steers_to_the_neighbours_of_the_fastest():
    plan = recognize(HERE.parent / "examples" / "swish_problem.py").plan
    space = search.space(plan)
    slow, fast = space[0], space[1]
    history = [search.Outcome(slow, "ok", 2.0), search.Outcome(fast, "ok", 1.0)]
    proposal = search.next_config(plan, history)
    assert sum(proposal[k] != fast[k] for k in fast) == 1
    assert search.best_config(history) == fast


# --- the policy reads the conversation ---------------------------------------------------------


def _feedback(verdict: str, attempt: int, median_ms: float | None = None) -> str:
    timing = {"measured": median_ms is not None, "median_ms": median_ms, "ci_low_ms": median_ms,
              "ci_high_ms": median_ms, "samples": 30, "note": "not measured"}
    record = {"verdict": verdict, "trials": 5, "errors": {"max_abs": 1e-6, "max_rel": 1e-6},
              "candidate_time": timing, "speedup_vs_eager": 1.5 if median_ms else None,
              "speedup_vs_compile": 1.1 if median_ms else None,
              "roofline": {"achieved_fraction": None, "floor_ms": None}, "torch_ops": [], "message": "details"}
    return render_feedback(verdict, attempt=attempt, record=record, best=None, is_best=True, repeated=False,
                           remaining=3)


def test_feedback_is_parsed_from_the_prompt_templates():
    assert parse_feedback(_feedback("ok", 1, 0.25)) == ("ok", 0.25)
    assert parse_feedback(_feedback("ok", 1)) == ("ok", None)
    for verdict in FEEDBACK_VERDICTS:  # every verdict with a feedback template, the evaluator fault included
        assert parse_feedback(_feedback(verdict, 2))[0] == verdict


def test_an_evaluator_fault_judges_nothing():
    """verdict error (ratchet failed, not the kernel): the configuration is proposed again, nothing is pruned."""
    plan = _plan("linear_gelu.py")
    first = search.next_config(plan, [])
    assert search.next_config(plan, [search.Outcome(first, "error")]) == first
    assert search.next_config(plan, [search.Outcome(first, "compile_error")]) != first


def test_policy_replies_with_distinct_configs_and_drops_failures():
    policy = BuiltinPolicy(PROBLEMS / "linear_gelu.py")
    messages = [{"role": "system", "content": "s"}, {"role": "user", "content": "task"}]
    chosen = []
    for attempt, verdict in enumerate(("compile_error", "ok", "ok"), start=1):
        reply = policy.complete(messages, [])
        assert [c.name for c in reply.tool_calls] == ["submit_kernel"]
        assert reply.usage.prompt_tokens == 0 and reply.usage.completion_tokens == 0
        source = json.loads(reply.tool_calls[0].arguments)["source"]
        assert "class ModelNew" in source
        config = parse_config(reply.content)
        chosen.append(config)
        messages += [reply.to_message(), {"role": "tool", "tool_call_id": reply.tool_calls[0].id,
                                          "content": _feedback(verdict, attempt)}]
    assert len({configs.key(c) for c in chosen}) == 3
    failed = chosen[0]
    for later in chosen[1:]:
        assert not search._dominates(later, failed)
    # a fresh policy (a resumed run) reads the same history from the conversation
    again = BuiltinPolicy(PROBLEMS / "linear_gelu.py")
    assert parse_config(again.complete(messages, []).content) == parse_config(policy.complete(messages, []).content)


def test_the_policy_follows_the_runs_precision():
    """A float32 product: 3xTF32 dots first under fp32 (the default), plain TF32 first under tf32."""
    fp32, tf32 = BuiltinPolicy(PROBLEMS / "linear_gelu.py"), BuiltinPolicy(PROBLEMS / "linear_gelu.py", precision="tf32")
    messages = [{"role": "system", "content": "s"}, {"role": "user", "content": "task"}]
    assert parse_config(fp32.complete(messages, []).content)["precision"] == "tf32x3"
    reply = tf32.complete(messages, [])
    assert parse_config(reply.content)["precision"] == "tf32"
    assert 'input_precision="tf32"' in json.loads(reply.tool_calls[0].arguments)["source"]
    for half in ("bf16", "fp16"):  # the problem drafted as the evaluator runs it, cast: native half dots
        reply = BuiltinPolicy(PROBLEMS / "linear_gelu.py", precision=half).complete(messages, [])
        assert parse_config(reply.content).get("precision") is None
        assert "input_precision" not in json.loads(reply.tool_calls[0].arguments)["source"]
    with pytest.raises(ValueError, match="'fp8' is not one of"):
        BuiltinPolicy(PROBLEMS / "linear_gelu.py", precision="fp8")
