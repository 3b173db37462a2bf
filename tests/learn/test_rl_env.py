"""The multi-turn RL environment: the agent's prompts and tools, the evaluator's reward."""
from __future__ import annotations

import json
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from agent.loop import nodes
from agent.learn.rl_env import EnvConfig, EpisodeDone, KernelEnv
from tools.env import target_name
from tools.reward import KernelReward, RewardConfig
from tools.toolcalls import tool_schemas

HERE = Path(__file__).parents[1]
PROBLEM = HERE / "rl_problems" / "scale_add.py"
sys.path.insert(0, str(PROBLEM.parent))
from scale_add_candidates import CHEAT_GUARD, FAST, SLOW, WRONG  # noqa: E402

pytestmark = pytest.mark.timeout(180)


@pytest.fixture(scope="module")
def reward():
    with KernelReward(RewardConfig(device="cpu", trials=2, spares=1)) as r:
        yield r


def submit(source: str, call_id: str) -> dict:
    return {"id": call_id, "type": "function", "function": {"name": "submit_kernel", "arguments": json.dumps({"source": source})}}


def test_reset_gives_the_agents_prompts_and_tools(reward):
    env = KernelEnv(EnvConfig(max_attempts=5), reward)
    messages, tools = env.reset(PROBLEM)
    # the agent's tools but get_ncu_profile (seconds of GPU per call in every rollout: not offered)
    assert tools == tool_schemas(True, counters=False) and [m["role"] for m in messages] == ["system", "user"]
    # exactly what `ratchet optimize` sends first for this problem and these settings (with
    # max_counter_calls = 0: no get_ncu_profile, whose session call is then None)
    config = SimpleNamespace(auxiliary_tools=True, max_attempts=5, gpu=None, precision="fp32")  # the settings nodes read
    ctx = SimpleNamespace(evaluator=env.evaluator, config=config, gpu=target_name(str(env.evaluator.device), config.gpu),
                          counters=None)
    state = {"language": "triton", "entry": "Model", "problem": str(PROBLEM),
             "baseline": {**nodes.empty_baseline(), **env.evaluator.baseline()}}  # as agent.loop.runner starts a run
    assert messages[0]["content"] == nodes.system_prompt(state, ctx)
    assert messages[1]["content"] == nodes.task_prompt(state, ctx)
    assert "You have 5 attempts." in messages[1]["content"] and "2.0 * x + y" in messages[1]["content"]
    no_aux = KernelEnv(EnvConfig(auxiliary_tools=False), reward)
    assert [t["function"]["name"] for t in no_aux.reset(PROBLEM)[1]] == ["submit_kernel"]


def test_an_episode_round_trip(reward):
    env = KernelEnv(EnvConfig(max_attempts=4), reward)
    env.reset(PROBLEM)
    # an auxiliary call: answered, free, not done
    result, r, done, info = env.step(("get_best", {}))
    assert result["role"] == "tool" and json.loads(result["content"])["source"] is None
    assert (r, done, info["kind"], info["attempts_used"]) == (0.0, False, "aux", 0)
    # a wrong kernel, then a correct one: the agent's feedback, the reward's values
    result, r, done, info = env.step(submit(WRONG, "w1"))
    assert result == env.messages[-1] and result["tool_call_id"] == "w1" and "differs from the reference" in result["content"]
    assert (r, done, info["verdict"], info["attempt"]) == (pytest.approx(0.1), False, "incorrect", 1)
    assert "3 attempts left" in result["content"]
    result, r, done, info = env.step(submit(FAST, "f1"))
    assert (r, info["verdict"], info["improved"]) == (pytest.approx(0.4), "ok", True)
    assert "This is the best kernel so far." in result["content"] and info["best"]["attempt"] == 2
    assert info["outcome"]["note"].startswith("speedup term 0") and info["record"]["verdict"] == "ok"
    # one turn, several calls: profile answered, the first submission evaluated (a repeat: not evaluated
    # again, no reward), the second submission not run
    replies, r, done, info = env.step_reply({"role": "assistant", "content": "again", "tool_calls": [
        {"id": "p", "type": "function", "function": {"name": "get_profile", "arguments": "{}"}},
        submit(FAST, "f2"), submit(SLOW, "s1")]})
    assert [m["tool_call_id"] for m in replies] == ["p", "s1", "f2"]
    assert json.loads(replies[0]["content"])["verdict"] == "ok" and "Not run" in replies[1]["content"]
    assert "identical to attempt 2" in replies[2]["content"] and info["repeat"] and r == 0.0 and not done
    # a reply with no tool call: a format error, as a user message; it uses the last attempt
    replies, r, done, info = env.step_reply({"role": "assistant", "content": "I am done thinking."})
    assert replies[0]["role"] == "user" and "called no tool" in replies[0]["content"]
    assert (r, done, info["kind"], info["attempts_used"]) == (0.0, True, "format_error", 4)
    assert env.total_reward == pytest.approx(0.5)
    with pytest.raises(EpisodeDone):
        env.step(submit(SLOW, "late"))
    # the conversation is a valid chat: every tool call answered once, in order
    calls = [c["id"] for m in env.messages if m["role"] == "assistant" for c in m.get("tool_calls", [])]
    answers = [m["tool_call_id"] for m in env.messages if m["role"] == "tool"]
    assert sorted(calls) == sorted(answers)


def test_cheats_and_the_policy_stopping(reward):
    env = KernelEnv(EnvConfig(max_attempts=10, max_aux_rounds=1), reward)
    env.reset(PROBLEM)
    result, r, done, info = env.step(submit(CHEAT_GUARD, "c"))
    assert (r, info["verdict"]) == (0.0, "rejected") and "try-except" in result["content"]
    assert info["outcome"]["reason"].startswith("guard:try-except")
    # malformed arguments count as an attempt; auxiliary-only turns past max_aux_rounds do too
    result, r, done, info = env.step(("submit_kernel", '{"source": '))
    assert info["kind"] == "format_error" and "not valid JSON" in result["content"] and info["attempts_used"] == 2
    env.step(("get_profile", {"attempt": 1}))
    replies, r, done, info = env.step_reply({"role": "assistant", "content": None, "tool_calls": [
        {"id": "d", "type": "function", "function": {"name": "diff_against_best", "arguments": "{}"}}]})
    assert info["kind"] == "format_error" and "too many tool calls" in replies[-1]["content"] and info["attempts_used"] == 3
    assert env.step(None) == (None, 0.0, True, {"kind": "stopped", "attempts_used": 3}) and env.done
