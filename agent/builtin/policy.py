"""The built-in offline policy: a deterministic `ModelClient` that drafts Triton kernels from
templates and searches their parameters, so `ratchet optimize` runs end to end with no endpoint.

It answers exactly as a language model would: every reply is one `submit_kernel` call with a
full candidate module, and the graph, the evaluator and the workspace run unchanged. What it
knows of earlier attempts it reads from the conversation the graph sends (its own replies carry
their configuration in the reply text; the tool results carry the evaluator's verdict and
times), so a resumed run continues the same search. Replies cost no tokens.

The problem comes from the constructor (`ratchet optimize` passes the module path and entry).
What no family claims is drafted by the fallback family (agent.builtin.fallback). When nothing can
be drafted, `unrecognized` says why in one line and the CLI ends the run before any attempt
(`kept_eager` when the forward has no work a kernel of its own could do: the reference stays the
answer); `complete` raises `NothingRecognized` if called anyway.
"""
from __future__ import annotations

import json
import threading
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from agent.builtin import codegen, families, search  # noqa: F401 - families: each registers itself
from agent.builtin.ir import Unrecognized
from agent.builtin.recognize import Recognition, recognize
from agent.model import Reply, ToolCall, Usage

NAME = "builtin"
MARKER = "ratchet builtin policy:"
VERDICT_LINES = (
    (re.compile(r"^Attempt \d+: correct"), "ok"),
    (re.compile(r"^Attempt \d+: it ran, but its output differs"), "incorrect"),
    (re.compile(r"^Attempt \d+: the module did not load or build"), "compile_error"),
    (re.compile(r"^Attempt \d+: rejected"), "rejected"),
    (re.compile(r"^Attempt \d+: it built, but raised"), "runtime_error"),
    (re.compile(r"^Attempt \d+: it ran past its time limit"), "timeout"),
    (re.compile(r"^Attempt \d+: the process running it died"), "crashed"),
    (re.compile(r"^Attempt \d+: not judged: the evaluator failed"), "error"),
)
MEDIAN = re.compile(r"Median time ([0-9.eE+-]+) (ms|us)")


class NothingRecognized(Exception):
    """The built-in policy has no template for this problem; str() is one line."""


class BuiltinPolicy:
    """`ModelClient` of the built-in policy for one problem."""

    name = NAME
    answers_at_once = True  # no server to wait on: its attempts come back to back (agent/model.py)

    def __init__(self, problem: str | Path, entry: str = "Model", precision: str = "fp32") -> None:
        """`precision`: the run's (tools/precision.py); it decides which dots a float32 product may
        use, and under bf16 or fp16 the problem is drafted as the evaluator runs it, cast."""
        from tools.precision import check

        self.path = Path(problem)
        self.entry = entry
        self.recognition: Recognition = recognize(self.path, entry, check(precision))
        if self.recognition.plan is not None:
            self.recognition.plan.precision = check(precision)
        self._proposed: dict[str, dict[str, Any]] = {}  # config key -> config, this session
        self._outcomes: dict[str, search.Outcome] = {}  # config key -> what the evaluator said
        self._turns = 0
        self._lock = threading.Lock()

    # --- what was recognized ---------------------------------------------------------------------

    @property
    def plan(self):
        return self.recognition.plan

    @property
    def unrecognized(self) -> str | None:
        """One line saying why nothing can be attempted, or None. A file that does not even load
        is left to the evaluator, which reports it as an invalid problem."""
        if self.plan is not None or self.recognition.load_error:
            return None
        return self.describe_failure()

    @property
    def kept_eager(self) -> bool:
        """Whether nothing is attempted because the forward has no work for a kernel of its own
        (agent.builtin.fallback): the reference stays the answer. `unrecognized` says why."""
        return self.plan is None and self.recognition.kept_eager

    def describe_failure(self) -> str:
        if self.recognition.kept_eager:
            return f"{self.path.name}: {self.recognition.reason}; nothing attempted"
        return (f"the built-in policy recognizes no pattern it has a kernel for in {self.path.name} "
                f"({self.recognition.reason}); nothing attempted")

    def close(self) -> None:
        pass

    # --- the protocol ------------------------------------------------------------------------------

    def complete(self, messages: Sequence[dict[str, Any]], tools: Sequence[dict[str, Any]], *,
                 seed: int | None = None) -> Reply:
        """The next configuration. The branches of a wide search ask at once: each is given one no
        other has been given (they share what this session proposed), so a step of width N judges N
        configurations; `seed` changes nothing (the space is walked in its order)."""
        with self._lock:
            return self._complete(messages)

    def _complete(self, messages: Sequence[dict[str, Any]]) -> Reply:
        if self.plan is None:
            raise NothingRecognized(self.describe_failure())
        history = self.history(messages)
        config = search.next_config(self.plan, history)
        note = "next configuration"
        if config is None:  # the space is spent: submit the best again (it is not evaluated twice)
            config = search.best_config(history) or search.space(self.plan)[0]
            note = "search space spent; the best configuration again"
        try:
            source = codegen.draft(self.plan, self.recognition.problem, config)
        except Unrecognized as exc:
            raise NothingRecognized(f"the built-in policy cannot draft a kernel for {self.path.name} ({exc})") from None
        k = search.key(config)
        self._proposed[k] = config
        self._turns += 1
        content = (f"{MARKER} {self.plan.kind} template, {self.plan.summary}; {note}; "
                   f"config {json.dumps(config, sort_keys=True)}")
        call = ToolCall(id=f"builtin_{self._turns}_{len(messages)}", name="submit_kernel",
                        arguments=json.dumps({"source": source}))
        return Reply(content=content, tool_calls=[call], usage=Usage(prompt_tokens=0, completion_tokens=0),
                     finish_reason="tool_calls")

    # --- reading the conversation ------------------------------------------------------------------

    def history(self, messages: Sequence[dict[str, Any]]) -> list[search.Outcome]:
        """Every configuration proposed so far, with the evaluator's verdict and median time where
        the conversation shows them (merged with what this session remembers)."""
        pending: dict[str, str] = {}  # tool call id -> config key
        for message in messages:
            role = message.get("role")
            if role == "assistant":
                config = parse_config(message.get("content"))
                if config is None:
                    continue
                k = search.key(config)
                self._proposed.setdefault(k, config)
                for call in message.get("tool_calls") or []:
                    pending[call.get("id")] = k
            elif role == "tool" and message.get("tool_call_id") in pending:
                k = pending.pop(message["tool_call_id"])
                verdict, median = parse_feedback(message.get("content"))
                if verdict is not None:
                    self._outcomes[k] = search.Outcome(self._proposed[k], verdict, median)
        out = []
        for k, config in self._proposed.items():
            out.append(self._outcomes.get(k) or search.Outcome(config, None))
        return out


def parse_config(content: Any) -> dict[str, Any] | None:
    if not isinstance(content, str) or not content.startswith(MARKER):
        return None
    _, sep, tail = content.rpartition("; config ")
    if not sep:
        return None
    try:
        config = json.loads(tail.strip())
    except ValueError:
        return None
    return config if isinstance(config, dict) else None


def parse_feedback(content: Any) -> tuple[str | None, float | None]:
    """The verdict and median time (ms) of a feedback message rendered from prompts/feedback_*.j2."""
    if not isinstance(content, str):
        return None, None
    first = content.strip().splitlines()[0] if content.strip() else ""
    verdict = next((v for pattern, v in VERDICT_LINES if pattern.search(first)), None)
    if verdict is None:
        return ("format_error" if first else None), None
    median = None
    match = MEDIAN.search(content)
    if verdict == "ok" and match:
        median = float(match.group(1)) * (1e-3 if match.group(2) == "us" else 1.0)
    return verdict, median
