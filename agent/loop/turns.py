"""One model turn: send the conversation (within the context budget), read the reply, answer
auxiliary tool calls, and turn the rest into a proposal (a candidate or a malformed reply).

Also the feedback the model gets for its latest proposal, rendered from the prompt templates.
Used by the draft and refine nodes; nothing here commits anything, and the evaluator is reached
only through get_ncu_profile's budgeted call (agent/loop/counters.py).
"""
from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol, cast

from agent.loop import context as ctxbudget
from agent.loop.render import render, render_feedback
from agent.loop.state import AgentState, AttemptSummary, Message, Proposal, TurnUsage, latest_attempt, latest_record
from tools.toolcalls import (DIFF_AGAINST_BEST, GET_BEST, GET_NCU_PROFILE, GET_PROFILE, SUBMIT_KERNEL, AuxRequest,
                             FormatError, Submission, best_payload, counters_payload, diff_payload, parse_call,
                             profile_payload)

if TYPE_CHECKING:
    from agent.loop.session import Session


def system_text(problem: Any, *, language: str, gpu: str, entry: str, auxiliary: bool, precision: str = "fp32",
                counters: bool = False) -> str:
    """The system prompt for a problem (a tools.ProblemInfo); shared with agent.learn.rl_env.
    `precision`: the run's (tools/precision.py), which says what float32 dots compare with;
    `counters`: whether get_ncu_profile is offered."""
    return render("system", language=language, gpu=gpu, entry=entry, single_op=getattr(problem, "single_op", None),
                  auxiliary=auxiliary, precision=precision, counters=counters and auxiliary)


def task_text(problem: Any, *, entry: str, problem_name: str, language: str, baseline: dict[str, Any],
              max_attempts: int) -> str:
    """The task message (reference source, inputs, baselines); shared with agent.learn.rl_env."""
    return render("task", entry=entry, problem_name=problem_name, reference_source=problem.source.rstrip(),
                  inputs=list(problem.inputs or []), init_args=list(getattr(problem, "init_args", None) or []),
                  ops=list(getattr(problem, "ops", None) or []), baseline=baseline, language=language,
                  max_attempts=max_attempts)


def first_line(text: str | None, limit: int = 160) -> str:
    line = next((l.strip() for l in (text or "").splitlines() if l.strip()), "")
    return line if len(line) <= limit else line[: limit - 3] + "..."


def remaining_attempts(state: AgentState, ctx: "Session", *, after: int = 0) -> int:
    return max(0, ctx.config.max_attempts - state.get("attempts_used", 0) - after)


def ask_model(state: AgentState, ctx: "Session", messages: list[Message]) -> dict[str, Any]:
    """Call the model until it proposes something (at most max_aux_rounds auxiliary-only turns).

    Returns the state updates: messages, usage, tokens_used, proposal. Raises ModelError."""
    messages = list(messages)
    usage = list(state.get("usage", []))
    tokens_used = state.get("tokens_used", 0)
    # a wide search's lineage and its seed (agent/loop/beam.py); no seed at width 1
    lineage, seed = cast(int, state.get("lineage", 0)), cast("int | None", state.get("seed"))
    for _round in range(max(1, ctx.config.max_aux_rounds + 1)):
        view, sent_tokens = request_of(messages, ctx)
        # the reply to exactly this request, where it was sent ahead of the fan-in (agent/loop/ahead.py)
        waiting = (ctx.ahead.take(lineage, request_key(view, ctx.tools, seed))
                   if ctx.ahead is not None and _round == 0 else None)
        reply, seconds = waiting if waiting is not None else call_model(ctx, view, seed)
        turn = len(usage) + 1
        usage.append(turn_usage(reply, seconds, sent_tokens, ctx, turn=turn))
        if waiting is not None:
            usage[-1]["ahead"] = "used"
        tokens_used += usage[-1]["tokens"]
        assistant = reply.to_message()
        assistant["_turn"] = turn
        assistant["_usage"] = {"prompt_tokens": reply.usage.prompt_tokens,
                               "completion_tokens": reply.usage.completion_tokens,
                               "context_tokens": sent_tokens, "cached_tokens": reply.usage.cached_tokens,
                               "cost_usd": usage[-1]["cost_usd"]}
        messages.append(assistant)

        reading = read_turn([(c.id, c.name, c.arguments) for c in reply.tool_calls], reply.content,
                            auxiliary=ctx.config.auxiliary_tools,
                            answer_aux=lambda r: answer_aux(r, RepoAttempts(state, ctx), ctx.counters),
                            remaining_after=remaining_attempts(state, ctx, after=1), counters=ctx.counters is not None)
        messages.extend(_tool_result(call_id, content, kind=kind) for call_id, content, kind in reading.answers)
        if reading.proposal is not None:
            call_id, found = reading.proposal
            if isinstance(found, Submission):
                proposal = Proposal(kind="submission", tool_call_id=call_id, source=found.source,
                                    source_hash=found.source_hash, reason=None)
            else:
                proposal = _format_error(call_id, found)
            return _turn_updates(messages, usage, tokens_used, proposal)
        # only auxiliary calls, all answered: ask again
    proposal = _format_error(None, render("aux_exhausted", rounds=ctx.config.max_aux_rounds + 1))
    return _turn_updates(messages, usage, tokens_used, proposal)


def request_of(messages: list[Message], ctx: "Session") -> tuple[list[Message], int]:
    """What one request sends of a conversation: its messages within the context budget, and
    their approximate tokens with the tools'."""
    view = ctxbudget.fit(messages, ctx.config.context_tokens, tools=ctx.tools, keep_reasoning=ctx.config.keep_reasoning)
    return view, ctxbudget.count(view) + ctxbudget.tools_tokens(ctx.tools)


def request_key(view: list[Message], tools: list[dict[str, Any]], seed: int | None) -> str:
    """What identifies a request: the messages as sent (metadata keys, `_`, never are), the tools, the seed."""
    sent = [{k: v for k, v in m.items() if not k.startswith("_")} for m in view]
    return hashlib.sha256(json.dumps([sent, tools, seed], sort_keys=True, default=str).encode()).hexdigest()


def call_model(ctx: "Session", view: list[Message], seed: int | None) -> tuple[Any, float]:
    """One model request: the reply and its seconds. Without a seed (width 1) none is passed, so a
    client written before seeds (no `seed` keyword) still works there."""
    start = time.monotonic()
    reply = ctx.model.complete(view, ctx.tools, seed=seed) if isinstance(seed, int) else ctx.model.complete(view, ctx.tools)
    return reply, time.monotonic() - start


def turn_usage(reply: Any, seconds: float, sent_tokens: int, ctx: "Session", *, turn: int) -> TurnUsage:
    """What one reply cost: the server's counts (approximations where it gave none) and dollars."""
    completion = reply.usage.completion_tokens
    if completion is None:
        completion = ctxbudget.approx_tokens((reply.content or "") + (reply.reasoning or "")
                                             + "".join(c.arguments for c in reply.tool_calls))
    prompt = reply.usage.prompt_tokens if reply.usage.prompt_tokens is not None else sent_tokens
    cached = reply.usage.cached_tokens
    cost = 0.0 if ctx.free else (None if ctx.price is None else ctx.price.cost(prompt, completion, cached or 0))
    return TurnUsage(turn=turn, prompt_tokens=reply.usage.prompt_tokens, completion_tokens=reply.usage.completion_tokens,
                     context_tokens=sent_tokens, seconds=round(seconds, 3), cached_tokens=cached,
                     tokens=prompt + completion, cost_usd=cost)


@dataclass
class TurnReading:
    """What one assistant turn proposes, and the answers to its other tool calls."""

    proposal: tuple[str | None, Submission | str] | None  # (call id, the submission or why the reply is
    # unusable: a format error); None when the turn made auxiliary calls only, all answered
    answers: list[tuple[str, str, str]] = field(default_factory=list)  # (call id, content, kind), in order


def read_turn(calls: list[tuple[str, str, Any]], content: str | None, *, auxiliary: bool,
              answer_aux: Callable[[AuxRequest], str], remaining_after: int, counters: bool = True) -> TurnReading:
    """The one reading of a turn, for the agent (ask_model) and the RL environment (agent.learn.rl_env):
    `calls` are (id, name, arguments). The first `submit_kernel` call is the proposal (later ones
    are answered "not run"); auxiliary calls are answered with `answer_aux`; a malformed call is
    the proposal (a format error) when nothing was submitted, otherwise answered, as is every
    further malformed call (`remaining_after`: the attempts left once this turn counts). A reply
    with no tool call is a format error."""
    if not calls:
        return TurnReading((None, "the reply called no tool" + ("" if content else " and was empty")))
    proposal: tuple[str | None, Submission | str] | None = None
    first_bad: tuple[str, str] | None = None
    answers: list[tuple[str, str, str]] = []

    def bad(call_id: str, reason: str) -> tuple[str, str, str]:
        return call_id, render("format_error", reason=reason, tool_call=True, remaining=remaining_after), "format_error"

    for call_id, name, arguments in calls:
        parsed = parse_call(name, arguments, auxiliary=auxiliary, counters=counters)
        if name == SUBMIT_KERNEL and proposal is None:
            proposal = (call_id, parsed if isinstance(parsed, Submission) else _reason(parsed))
        elif name == SUBMIT_KERNEL:
            answers.append((call_id, render("aux_ignored"), "ignored"))
        elif isinstance(parsed, AuxRequest):
            answers.append((call_id, answer_aux(parsed), "aux"))
        elif first_bad is None:
            first_bad = (call_id, _reason(parsed))
        else:
            answers.append(bad(call_id, _reason(parsed)))
    if proposal is not None:
        if first_bad is not None:  # answered now; the submission is answered once it is evaluated
            answers.append(bad(*first_bad))
        return TurnReading(proposal, answers)
    return TurnReading(first_bad, answers)


def _reason(parsed: Any) -> str:
    return parsed.reason if isinstance(parsed, FormatError) else "unusable tool call"


def _turn_updates(messages: list[Message], usage: list[TurnUsage], tokens_used: int, proposal: Proposal) -> dict[str, Any]:
    return {"messages": messages, "usage": usage, "tokens_used": tokens_used, "proposal": proposal}


def _format_error(tool_call_id: str | None, reason: str) -> Proposal:
    return Proposal(kind="format_error", tool_call_id=tool_call_id, source=None, source_hash=None, reason=reason)


def _tool_result(tool_call_id: str, content: str, *, kind: str, **meta: Any) -> Message:
    message: Message = {"role": "tool", "tool_call_id": tool_call_id, "content": content, "_kind": kind}
    message.update({f"_{k}": v for k, v in meta.items()})
    return message


class AttemptLookup(Protocol):
    """What the auxiliary tools read, from whichever store holds the attempts: the workspace's
    repository (`ratchet optimize`) or an RL episode's memory (agent.learn.rl_env)."""

    def best(self) -> tuple[int, str | None, dict[str, Any] | None] | None:
        """(number, source, record) of the best attempt, or None."""

    def latest(self) -> tuple[int, str | None] | None:
        """(number, source) of the latest attempt, or None."""

    def record(self, number: Any) -> dict[str, Any] | None:
        """The result record of attempt `number` (as the model gave it), or None."""

    def source(self, number: Any) -> str | None:
        """The source of attempt `number`, or None."""


def answer_aux(request: AuxRequest, attempts: AttemptLookup,
               counters: Callable[[str], tuple[dict[str, Any] | None, str | None]] | None = None) -> str:
    """The JSON (or diff) text returned for get_best, diff_against_best, get_profile and
    get_ncu_profile: one handler for the agent graph and the RL environment, so their trajectories
    cannot drift. `counters(source)`: (the counters, None) or (None, why not), budgeted by the caller."""
    if request.name == GET_NCU_PROFILE:
        number = request.arguments.get("attempt") or None
        if number is None and (latest := attempts.latest()) is not None:
            number = latest[0]
        source = attempts.source(number) if number else None
        if source is None:
            return counters_payload(number, None)
        if counters is None:
            return counters_payload(number, None, "hardware counters are not offered here")
        return counters_payload(number, *counters(source))
    if request.name == GET_PROFILE:
        number = request.arguments.get("attempt") or None
        if number is None and (latest := attempts.latest()) is not None:
            number = latest[0]
        return profile_payload(number, attempts.record(number) if number else None)
    if request.name not in (GET_BEST, DIFF_AGAINST_BEST):
        return json.dumps({"error": f"unknown tool {request.name}"})
    best = attempts.best()
    if request.name == GET_BEST:
        return best_payload(*best) if best else best_payload(None, None, None)
    source, name = request.arguments.get("source"), "your source"
    if source is None and (latest := attempts.latest()) is not None:
        source, name = latest[1], f"attempt {latest[0]}"
    return diff_payload(best[1] if best else None, source,
                        best_name=f"attempt {best[0]} (best)" if best else "best", name=name)


@dataclass
class RepoAttempts:
    """The run's attempts in the workspace: the run's best (else the workspace's) and its latest."""
    state: AgentState
    ctx: "Session"

    def best(self) -> tuple[int, str | None, dict[str, Any] | None] | None:
        repo = self.ctx.repo
        best = self.state.get("best")
        number = best["attempt"] if best else None
        found = repo.attempt(number) if number else repo.best()
        return (found.number, repo.source(found), repo.record(found)) if found else None

    def latest(self) -> tuple[int, str | None] | None:
        latest = self.state.get("latest")
        number = latest["attempt"] if latest else None
        found = self.ctx.repo.attempt(number) if number else None
        return (found.number, self.ctx.repo.source(found)) if found else None

    def record(self, number: Any) -> dict[str, Any] | None:
        found = self.ctx.repo.attempt(number)
        return self.ctx.repo.record(found) if found else None

    def source(self, number: Any) -> str | None:
        found = self.ctx.repo.attempt(number)
        return self.ctx.repo.source(found) if found else None


def feedback_message(state: AgentState, ctx: "Session") -> Message:
    """The answer to the latest proposal: the evaluator's outcome, or why the reply was unusable."""
    proposal = state["proposal"]
    remaining = remaining_attempts(state, ctx)
    if proposal is None:
        raise ValueError("no proposal to answer")
    if proposal["kind"] == "format_error":
        content = render("format_error", reason=proposal["reason"], tool_call=proposal["tool_call_id"] is not None,
                         remaining=remaining)
        meta: dict[str, Any] = {"_verdict": "format_error", "_detail": first_line(proposal["reason"]), "_kind": "format_error"}
    else:
        latest, record = latest_attempt(state), latest_record(state)
        content = render_feedback(record["verdict"], attempt=latest["attempt"], record=record, best=state.get("best"),
                                  is_best=bool(state.get("improved")), repeated=latest["reused"] and latest["repeat"],
                                  remaining=remaining)
        meta = {"_attempt": latest["attempt"], "_verdict": record["verdict"],
                "_speedup_vs_eager": latest["speedup_vs_eager"], "_detail": latest["detail"], "_kind": "feedback"}
    if proposal["tool_call_id"] is not None:
        return {"role": "tool", "tool_call_id": proposal["tool_call_id"], "content": content, **meta}
    return {"role": "user", "content": content, **meta}
