"""The context budget (agent.loop.context), the prompt templates (agent.loop.render) and the settings (agent.config)."""
from __future__ import annotations

import json

import jinja2
import pytest

from agent.loop import context
from agent.config import ConfigError, load_config
from agent.loop.render import FEEDBACK_VERDICTS, PROMPTS_DIR, render, render_feedback
from tools.record import Result, Verdict

SOURCE = "import torch\nclass ModelNew(torch.nn.Module):\n" + "    x = 1  # padding padding padding\n" * 200


def conversation(attempts: int) -> list[dict]:
    messages = [{"role": "system", "content": "S" * 2000}, {"role": "user", "content": "T" * 2000}]
    for n in range(1, attempts + 1):
        messages.append({"role": "assistant", "content": None, "reasoning_content": "thinking " * 100,
                         "tool_calls": [{"id": f"c{n}", "type": "function",
                                         "function": {"name": "submit_kernel", "arguments": json.dumps({"source": SOURCE})}}],
                         "_turn": n})
        messages.append({"role": "tool", "tool_call_id": f"c{n}", "content": f"Attempt {n}: incorrect\n" + "detail " * 300,
                         "_attempt": n, "_verdict": "incorrect", "_speedup_vs_eager": None, "_detail": f"diff {n}"})
    return messages


def test_everything_fits_metadata_and_reasoning_are_not_sent():
    messages = conversation(2)
    view = context.fit(messages, 10**6)
    assert len(view) == len(messages)
    assert all(not k.startswith("_") for m in view for k in m)
    assert all("reasoning_content" not in m for m in view)
    assert "reasoning_content" in context.fit(messages, 10**6, keep_reasoning=True)[2]


def test_trimming_keeps_system_task_and_latest_round_whole():
    messages = conversation(12)
    budget = context.count([context.wire(m) for m in messages[:2] + messages[-2:]]) + 1500
    view = context.fit(messages, budget)
    assert context.count(view) <= budget
    assert view[0] == {"role": "system", "content": "S" * 2000}
    assert view[1] == {"role": "user", "content": "T" * 2000}
    assert view[-2]["tool_calls"][0]["function"]["arguments"] == json.dumps({"source": SOURCE})
    assert view[-1]["content"].startswith("Attempt 12")
    # tool results always follow their call
    ids = set()
    for m in view:
        for call in m.get("tool_calls") or []:
            ids.add(call["id"])
        if m["role"] == "tool":
            assert m["tool_call_id"] in ids
    # the dropped attempts are summarized
    summary = next(m for m in view[2:] if m["role"] == "user")
    assert "attempt 1: incorrect: diff 1" in summary["content"]


def test_compaction_before_dropping():
    messages = conversation(3)
    full = context.count([context.wire(m) for m in messages])
    view = context.fit(messages, full - 1500)
    assert len(view) == len(messages)  # nothing dropped, the oldest compacted
    arguments = json.loads(view[2]["tool_calls"][0]["function"]["arguments"])
    assert "omitted to save context" in arguments["source"] and "attempt 1" in arguments["source"]


def test_tiny_budget_never_touches_the_task():
    messages = conversation(5)
    view = context.fit(messages, 100)
    assert view[0]["content"] == "S" * 2000 and view[1]["content"] == "T" * 2000
    assert view[-1]["role"] == "tool"


def test_every_verdict_has_a_feedback_template():
    record = Result(verdict=Verdict.OK, message="all good").to_dict()
    for verdict in FEEDBACK_VERDICTS:
        assert (PROMPTS_DIR / f"feedback_{verdict}.j2").is_file()
        text = render_feedback(verdict, attempt=3, record={**record, "verdict": verdict}, best=None, is_best=False,
                               repeated=False, remaining=2)
        assert "Attempt 3" in text and "2 attempts left" in text
    assert "not measured" in render_feedback("ok", attempt=1, record=record, best=None, is_best=True,
                                             repeated=True, remaining=1)


def test_templates_are_strict():
    with pytest.raises(jinja2.UndefinedError):
        render_feedback("incorrect", attempt=1, record={"verdict": "incorrect"}, best=None, is_best=False,
                        repeated=False, remaining=1)
    text = render("format_error", reason="the reply called no tool", tool_call=False, remaining=4)
    assert "submit_kernel" in text and "4 attempts left" in text


def test_system_prompt_languages():
    triton = render("system", language="triton", gpu="NVIDIA H100", entry="Model", single_op="aten::relu", auxiliary=True,
                    precision="fp32", counters=True)
    assert "@triton.jit" in triton and "NVIDIA H100" in triton and "aten::relu" in triton and "get_best" in triton
    assert "get_ncu_profile" in triton
    assert "## Precision: fp32" in triton and 'input_precision="tf32x3"' in triton  # IEEE baselines: say so
    cuda = render("system", language="cuda", gpu="NVIDIA H100", entry="Model", single_op=None, auxiliary=False,
                  precision="tf32", counters=False)
    assert "load_inline" in cuda and "@triton.jit" not in cuda and "get_best" not in cuda and "get_ncu" not in cuda
    assert "## Precision: tf32" in cuda and "on TF32 tensor cores" in cuda and "tf32x3" not in cuda


def test_config_precedence(tmp_path):
    file = tmp_path / "ratchet.toml"
    file.write_text('model = "from-file"\nmax_attempts = 7\n[optimize]\npatience = 3\nbase_url = "http://file"\n')
    env = {"RATCHET_MAX_ATTEMPTS": "9", "OPENAI_BASE_URL": "http://env", "OPENAI_API_KEY": "sk-env"}
    config = load_config({"max_attempts": 4, "model": None}, env=env, config_file=str(file))
    assert (config.model, config.max_attempts, config.patience, config.base_url, config.api_key) == \
        ("from-file", 4, 3, "http://env", "sk-env")
    assert config.sources()["max_attempts"] == "command line"
    assert load_config({}, env={"OPENAI_BASE_URL": "http://a", "RATCHET_BASE_URL": "http://b"}).base_url == "http://b"
    with pytest.raises(ConfigError, match="RATCHET|max_attempts"):
        load_config({}, env={"RATCHET_MAX_ATTEMPTS": "lots"})
    with pytest.raises(ConfigError, match="unknown setting"):
        file.write_text("colour = 1\n")
        load_config({}, env={}, config_file=str(file))


def test_feedback_and_task_with_gpu_figures():
    result = Result(verdict=Verdict.OK, message="Correct on 5 trials.", trials=5, speedup_vs_eager=1.84,
                    speedup_vs_compile=0.97, torch_ops=["aten::sum"])
    result.candidate_time.measured, result.candidate_time.median_ms = True, 0.412
    result.candidate_time.ci_low_ms, result.candidate_time.ci_high_ms, result.candidate_time.samples = 0.409, 0.415, 60
    result.roofline.achieved_fraction, result.roofline.floor_ms = 0.41, 0.169
    best = {"attempt": 2, "speedup_vs_eager": 2.1}
    text = render_feedback("ok", attempt=3, record=result.to_dict(), best=best, is_best=False, repeated=False, remaining=5)
    assert "412 us" in text and "1.84x vs eager" in text and "0.97x vs torch.compile" in text
    assert "41% of the hardware's floor" in text and "aten::sum" in text and "attempt 2 (2.10x vs eager)" in text
    task = render("task", entry="Model", problem_name="p.py", reference_source="class Model: ...",
                  inputs=[{"kind": "tensor", "shape": [8, 4096], "dtype": "float16"}, {"kind": "scalar", "value": 3}],
                  init_args=[{"kind": "scalar", "value": 64}], ops=["aten::softmax"], language="cuda", max_attempts=9,
                  baseline={"eager_ms": 1.5, "compile_ms": 0.8, "floor_ms": 0.05, "bytes_moved": 134_217_728,
                            "flops": 3 * 10**9, "measured": True})
    assert "tensor (8, 4096) float16" in task and "scalar value=3" in task and "1.5 ms" in task
    assert "134 MB moved" in task and "3 GFLOP" in task and "CUDA C++" in task and "9 attempts" in task
    assert "not measured" not in task
