"""tools.toolcalls: the schemas the model sees and the parsing of its calls."""
from __future__ import annotations

import json

from tools.toolcalls import (AuxRequest, FormatError, Submission, diff_payload, parse_call, profile_payload,
                             source_hash, tool_schemas)

GOOD = "import torch\n\nclass ModelNew(torch.nn.Module):\n    def forward(self, x):\n        return x\n"


def test_schemas_are_openai_function_tools():
    tools = tool_schemas()
    names = [t["function"]["name"] for t in tools]
    assert names == ["submit_kernel", "get_best", "diff_against_best", "get_profile", "get_ncu_profile"]
    assert "get_ncu_profile" not in [t["function"]["name"] for t in tool_schemas(counters=False)]
    for tool in tools:
        assert tool["type"] == "function"
        assert tool["function"]["parameters"]["type"] == "object"
        json.dumps(tool)
    assert [t["function"]["name"] for t in tool_schemas(auxiliary=False)] == ["submit_kernel"]
    tools[0]["function"]["name"] = "mutated"
    assert tool_schemas()[0]["function"]["name"] == "submit_kernel"


def test_valid_submission():
    parsed = parse_call("submit_kernel", json.dumps({"source": GOOD}))
    assert parsed == Submission(GOOD, source_hash(GOOD))


def test_markdown_fence_is_removed():
    parsed = parse_call("submit_kernel", json.dumps({"source": f"```python\n{GOOD}```"}))
    assert isinstance(parsed, Submission) and parsed.source.startswith("import torch")


def test_malformed_calls_get_one_line_reasons():
    cases = {
        ("submit_kernel", '{"source": "class ModelNew'): "not valid JSON",
        ("submit_kernel", "[1, 2]"): "must be a JSON object",
        ("submit_kernel", "{}"): '"source"',
        ("submit_kernel", json.dumps({"source": 42})): '"source"',
        ("submit_kernel", json.dumps({"source": "def f(:\n"})): "not a Python module: SyntaxError at line 1",
        ("submit_kernel", json.dumps({"source": "class Model: pass\n"})): "no top-level class ModelNew",
        ("submit_kernel", json.dumps({"source": "   "})): "empty",
        ("run_shell", "{}"): "unknown tool 'run_shell'",
        ("get_profile", json.dumps({"attempt": "x"})): "positive integer",
        ("get_ncu_profile", json.dumps({"attempt": 0})): "get_ncu_profile: \"attempt\" must be a positive integer",
    }
    for (name, args), expected in cases.items():
        parsed = parse_call(name, args)
        assert isinstance(parsed, FormatError), (name, args)
        assert expected in parsed.reason and "\n" not in parsed.reason


def test_auxiliary_requests():
    assert parse_call("get_best", "") == AuxRequest("get_best", {})
    assert parse_call("get_profile", '{"attempt": 2}') == AuxRequest("get_profile", {"attempt": 2})
    assert isinstance(parse_call("get_best", "{}", auxiliary=False), FormatError)
    assert parse_call("get_ncu_profile", "{}") == AuxRequest("get_ncu_profile", {})
    refused = parse_call("get_ncu_profile", "{}", counters=False)  # where it is not offered (RL episodes)
    assert isinstance(refused, FormatError) and "unknown tool 'get_ncu_profile'" in refused.reason


def test_payloads():
    diff = diff_payload("a\nb\n", "a\nc\n")
    assert "-b" in diff and "+c" in diff
    assert json.loads(diff_payload(None, "x"))["diff"] is None
    profile = json.loads(profile_payload(3, {"verdict": "ok", "speedup_vs_eager": 1.5, "message": "m"}))
    assert profile == {"attempt": 3, "verdict": "ok", "speedup_vs_eager": 1.5}


def test_one_reading_of_a_turn_for_the_agent_and_the_rl_environment():
    """agent.loop.turns.read_turn, which ask_model and KernelEnv.step_reply both use: the first
    submission is the proposal, a second is not run, auxiliary calls are answered, and every
    malformed call is answered (the first last, after the others) while the submission waits."""
    from agent.loop.turns import read_turn

    asked = []
    calls = [("c1", "get_best", "{}"), ("c2", "submit_kernel", json.dumps({"source": GOOD})),
             ("c3", "no_such_tool", "{}"), ("c4", "submit_kernel", json.dumps({"source": GOOD})),
             ("c5", "submit_kernel_typo", "{}")]
    reading = read_turn(calls, None, auxiliary=True, answer_aux=lambda r: asked.append(r.name) or "best: none",
                        remaining_after=3)
    assert reading.proposal == ("c2", Submission(GOOD, source_hash(GOOD)))
    assert [(call_id, kind) for call_id, _, kind in reading.answers] == [
        ("c1", "aux"), ("c4", "ignored"), ("c5", "format_error"), ("c3", "format_error")]
    assert asked == ["get_best"] and reading.answers[0][1] == "best: none"
    assert "3 attempts left" in reading.answers[2][1]  # the attempts left once this turn counts

    bad = read_turn([("c1", "submit_kernel", "{not json")], None, auxiliary=True, answer_aux=str, remaining_after=0)
    assert bad.proposal[0] == "c1" and isinstance(bad.proposal[1], str) and bad.answers == []
    only_aux = read_turn([("c1", "get_profile", "{}")], None, auxiliary=True, answer_aux=lambda r: "{}", remaining_after=1)
    assert only_aux.proposal is None and only_aux.answers == [("c1", "{}", "aux")]
    assert read_turn([], "", auxiliary=True, answer_aux=str, remaining_after=1).proposal == (
        None, "the reply called no tool and was empty")
    # with the auxiliary tools off, an auxiliary call is a malformed one
    off = read_turn([("c1", "get_best", "{}")], "text", auxiliary=False, answer_aux=str, remaining_after=1)
    assert off.proposal[0] == "c1" and isinstance(off.proposal[1], str)
