"""tools.toolcalls: the schemas the model sees and the parsing of its calls."""
from __future__ import annotations

import json

from tools.toolcalls import (AuxRequest, FormatError, Submission, diff_payload, parse_call, profile_payload,
                             source_hash, tool_schemas)

GOOD = "import torch\n\nclass ModelNew(torch.nn.Module):\n    def forward(self, x):\n        return x\n"


def test_schemas_are_openai_function_tools():
    tools = tool_schemas()
    names = [t["function"]["name"] for t in tools]
    assert names == ["submit_kernel", "get_best", "diff_against_best", "get_profile"]
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
    }
    for (name, args), expected in cases.items():
        parsed = parse_call(name, args)
        assert isinstance(parsed, FormatError), (name, args)
        assert expected in parsed.reason and "\n" not in parsed.reason


def test_auxiliary_requests():
    assert parse_call("get_best", "") == AuxRequest("get_best", {})
    assert parse_call("get_profile", '{"attempt": 2}') == AuxRequest("get_profile", {"attempt": 2})
    assert isinstance(parse_call("get_best", "{}", auxiliary=False), FormatError)


def test_payloads():
    diff = diff_payload("a\nb\n", "a\nc\n")
    assert "-b" in diff and "+c" in diff
    assert json.loads(diff_payload(None, "x"))["diff"] is None
    profile = json.loads(profile_payload(3, {"verdict": "ok", "speedup_vs_eager": 1.5, "message": "m"}))
    assert profile == {"attempt": 3, "verdict": "ok", "speedup_vs_eager": 1.5}
