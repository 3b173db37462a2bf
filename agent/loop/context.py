"""The context budget: which part of the conversation is sent to the model on each turn.

The full conversation stays in the graph state and the saved trajectory; `fit` derives the
view sent to the model so that it stays within a token budget. The first two messages (the
system prompt and the task) are never touched. When the whole conversation does not fit:

1. older turns are compacted, oldest first: the source in an old `submit_kernel` call is
   replaced by a one-line stub (the arguments stay valid JSON), long tool results are cut to
   their first lines, and reasoning text is dropped;
2. if that is not enough, the oldest turns are dropped and replaced by one summary message
   (prompts/history_summary.j2) listing each dropped attempt's verdict and speedup;
3. the latest turn is kept whole when it fits, and cut only as a last resort.

Tokens are approximated as characters / 4 (plus a few per message), which is close for
English text and code with BPE tokenizers; the real counts the server reports are recorded
separately for the token budget. Keys starting with "_" are metadata kept in the trajectory
and never sent.
"""
from __future__ import annotations

import copy
import json
import math
from collections.abc import Sequence
from typing import Any

from agent.loop.render import render

CHARS_PER_TOKEN = 4
MESSAGE_OVERHEAD = 4  # role, separators
PINNED = 2  # the system prompt and the task
OLD_TOOL_RESULT_CHARS = 600
Message = dict[str, Any]


def approx_tokens(text: str | None) -> int:
    return math.ceil(len(text or "") / CHARS_PER_TOKEN)


def message_tokens(message: Message) -> int:
    total = MESSAGE_OVERHEAD + approx_tokens(_text(message.get("content")))
    total += approx_tokens(message.get("reasoning_content"))
    for call in message.get("tool_calls") or []:
        function = call.get("function", {})
        total += MESSAGE_OVERHEAD + approx_tokens(function.get("name")) + approx_tokens(function.get("arguments"))
    return total


def tools_tokens(tools: Sequence[dict[str, Any]]) -> int:
    return approx_tokens(json.dumps(list(tools))) if tools else 0


def count(messages: Sequence[Message]) -> int:
    return sum(message_tokens(m) for m in messages)


def _text(content: Any) -> str:
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    return json.dumps(content)  # a list of content parts


def wire(message: Message, *, keep_reasoning: bool = False) -> Message:
    """The message as sent: metadata keys removed, reasoning removed unless asked for."""
    out = {k: v for k, v in message.items() if not k.startswith("_")}
    if not keep_reasoning:
        out.pop("reasoning_content", None)
    return out


def rounds(messages: Sequence[Message]) -> list[list[Message]]:
    """Split turns into rounds: an assistant message with the tool and user messages answering it."""
    out: list[list[Message]] = []
    for message in messages:
        if message.get("role") == "assistant" or not out:
            out.append([message])
        else:
            out[-1].append(message)
    return out


def _compact(round_: list[Message]) -> list[Message]:
    numbers = [m["_attempt"] for m in round_ if m.get("_attempt") is not None]
    compacted = []
    for message in round_:
        message = copy.deepcopy(message)
        message.pop("reasoning_content", None)
        if message.get("role") == "assistant":
            if message.get("content"):
                message["content"] = _cut(message["content"], OLD_TOOL_RESULT_CHARS)
            for call in message.get("tool_calls") or []:
                function = call.get("function", {})
                if len(function.get("arguments") or "") > OLD_TOOL_RESULT_CHARS:
                    stub = render("omitted_source", attempt=numbers[0] if numbers else None)
                    function["arguments"] = json.dumps({"source": stub})
        elif isinstance(message.get("content"), str):
            message["content"] = _cut(message["content"], OLD_TOOL_RESULT_CHARS)
        message["_compacted"] = True
        compacted.append(message)
    return compacted


def _cut(text: str, limit: int) -> str:
    if len(text) <= limit:
        return text
    return text[:limit].rstrip() + "\n" + render("cut_note", chars=len(text) - limit)


def _summary_items(dropped: list[list[Message]]) -> list[dict[str, Any]]:
    items = []
    for round_ in dropped:
        for message in round_:
            if "_attempt" in message or "_verdict" in message:
                items.append({
                    "attempt": message.get("_attempt", "?"),
                    "verdict": message.get("_verdict", "?"),
                    "speedup_vs_eager": message.get("_speedup_vs_eager"),
                    "detail": message.get("_detail", ""),
                })
    return items


def fit(messages: Sequence[Message], budget: int, *, tools: Sequence[dict[str, Any]] = (),
        keep_reasoning: bool = False) -> list[Message]:
    """The messages to send, within `budget` approximate tokens (tool schemas included)."""
    sendable = [wire(m, keep_reasoning=keep_reasoning) for m in messages]
    budget = budget - tools_tokens(tools)
    if count(sendable) <= budget or len(messages) <= PINNED:
        return sendable

    pinned = [wire(m) for m in messages[:PINNED]]
    turns = rounds(list(messages[PINNED:]))

    # 1. compact older rounds, oldest first, until it fits
    for index in range(len(turns) - 1):
        if _size(pinned, None, turns, keep_reasoning) <= budget:
            break
        turns[index] = _compact(turns[index])
    # 2. drop the oldest rounds behind a summary
    dropped: list[list[Message]] = []
    while len(turns) > 1:
        summary = _summary(dropped)
        if _size(pinned, summary, turns, keep_reasoning) <= budget:
            break
        dropped.append(turns.pop(0))
    summary = _summary(dropped)
    view = pinned + ([summary] if summary else []) + [wire(m, keep_reasoning=keep_reasoning) for t in turns for m in t]
    # 3. the latest round alone is too large: cut its longest texts
    excess = count(view) - budget
    if excess > 0:
        for message in sorted(view[len(pinned) + bool(summary):], key=message_tokens, reverse=True):
            content = message.get("content")
            if not isinstance(content, str) or excess <= 0:
                continue
            keep = max(200, len(content) - excess * CHARS_PER_TOKEN)
            before = message_tokens(message)
            message["content"] = _cut(content, keep)
            excess -= before - message_tokens(message)
    return view


def _summary(dropped: list[list[Message]]) -> Message | None:
    if not dropped:
        return None
    return {"role": "user", "content": render("history_summary", attempts=_summary_items(dropped))}


def _size(pinned: list[Message], summary: Message | None, turns: list[list[Message]], keep_reasoning: bool) -> int:
    total = count(pinned) + (message_tokens(summary) if summary else 0)
    return total + sum(message_tokens(wire(m, keep_reasoning=keep_reasoning)) for t in turns for m in t)
