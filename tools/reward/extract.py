"""The candidate in a completion, for the RL reward.

A completion is a full candidate source, or a chat reply containing one: a `submit_kernel` tool
call (OpenAI `tool_calls`, a `<tool_call>{...}</tool_call>` block or a bare JSON call), or a
```python fence defining `ModelNew`. Anything else is a FormatError (the reward's verdict
"format_error", reward 0). Nothing a completion holds makes extraction raise.
"""
from __future__ import annotations

import json
import re
from typing import Any, Sequence

from tools.toolcalls import SUBMIT_KERNEL, FormatError, Submission, parse_call, validate_source

_TOOL_TAG = re.compile(r"<tool_call>\s*(.*?)\s*</tool_call>", re.DOTALL)
_FENCE = re.compile(r"```[ \t]*(?P<lang>[\w+-]*)[ \t]*\n(?P<body>.*?)```", re.DOTALL)
_CALL_START = re.compile(r'\{\s*"(?:name|function|type)"')


def extract_source(completion: Any) -> Submission | FormatError:
    """The candidate in a completion: a string, one chat message, or a list of messages."""
    if isinstance(completion, dict):
        completion = [completion]
    if isinstance(completion, (list, tuple)):
        return _from_messages(completion)
    if isinstance(completion, str):
        return _from_text(completion)
    return FormatError(f"a completion must be a string or chat messages, not {type(completion).__name__}")


def _from_messages(messages: Sequence[Any]) -> Submission | FormatError:
    found: FormatError | None = None
    for message in reversed([m for m in messages if isinstance(m, dict) and m.get("role", "assistant") == "assistant"]):
        calls = message.get("tool_calls")
        for call in calls if isinstance(calls, list) else []:
            fn = call.get("function", call) if isinstance(call, dict) else {}
            if isinstance(fn, dict) and fn.get("name") == SUBMIT_KERNEL:
                return _submission(parse_call(SUBMIT_KERNEL, fn.get("arguments")))
        content = message.get("content")
        if isinstance(content, list):  # content parts
            content = "".join(p["text"] for p in content if isinstance(p, dict) and isinstance(p.get("text"), str))
        if isinstance(content, str) and content.strip():
            parsed = _from_text(content)
            if isinstance(parsed, Submission):
                return parsed
            found = found or parsed
    return found or FormatError("the completion holds no assistant message with a submit_kernel call or a ModelNew source")


def _from_text(text: str) -> Submission | FormatError:
    calls = [m.group(1) for m in _TOOL_TAG.finditer(text)]
    calls += [_raw_json(text, m.start()) for m in _CALL_START.finditer(text)]
    first_error: FormatError | None = None
    for raw in calls:
        call = _json_object(raw)
        fn = call.get("function", call) if call else None
        if isinstance(fn, dict) and fn.get("name") == SUBMIT_KERNEL:
            parsed = _submission(parse_call(SUBMIT_KERNEL, fn.get("arguments", fn.get("parameters"))))
            if isinstance(parsed, Submission):
                return parsed
            first_error = first_error or parsed
    fences = [m for m in _FENCE.finditer(text) if m.group("lang").lower() in ("", "python", "py", "python3")]
    for match in reversed(fences):  # the last fence that is a candidate
        parsed = validate_source(match.group("body"))
        if isinstance(parsed, Submission):
            return parsed
        first_error = first_error or parsed
    if not fences and not calls:
        parsed = validate_source(text)
        if isinstance(parsed, Submission):
            return parsed
        first_error = first_error or parsed
    return first_error or FormatError("no ModelNew source found in the completion")


def _raw_json(text: str, start: int) -> str:
    try:
        _, end = json.JSONDecoder().raw_decode(text, start)
    except ValueError:
        return ""
    return text[start:end]


def _json_object(raw: str) -> dict[str, Any] | None:
    try:
        value = json.loads(raw)
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


def _submission(parsed: Any) -> Submission | FormatError:
    return parsed if isinstance(parsed, (Submission, FormatError)) else FormatError("not a submit_kernel call")
