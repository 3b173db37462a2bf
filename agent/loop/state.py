"""The graph's state: JSON-serializable data only (paths, hashes, records, the message list).

Live objects (the model client, the evaluator, the workspace repository) are never stored here;
nodes reach them through `agent.loop.session.Session`, which LangGraph passes as the run context.
Every key but `branches` is replaced (not merged) by the node that returns it, so a checkpoint is
simply the state after a node, and a resumed run starts from the last one written. `branches` is
the fan-in (agent/loop/beam.py): each candidate of a step adds its report, and `select` empties it.

A step asks and judges `width` candidates at once, one per lineage (a conversation of its own: a
`Lineage`); each runs the candidate subgraph on a `Branch`, the run's keys with its lineage's over
them. The run's own `messages`, `proposal`, `record`, `latest` and `phases` are its lead lineage's
(the step's best candidate): at width 1, the one conversation, as before lineages existed.
"""
from __future__ import annotations

from typing import Annotated, Any, Literal, NotRequired, TypedDict

Message = dict[str, Any]  # an OpenAI chat message; keys starting with "_" are metadata, never sent


class Proposal(TypedDict):
    """What the model's latest turn proposed: a candidate, or a malformed reply."""

    kind: Literal["submission", "format_error"]
    tool_call_id: str | None  # the call to answer; None when the reply had no tool call
    source: str | None
    source_hash: str | None
    reason: str | None  # for a format error: one line, written for the model


class AttemptSummary(TypedDict):
    """One evaluated attempt: the key figures of its workspace commit."""

    attempt: int
    sha: str
    source_hash: str
    verdict: str
    speedup_vs_eager: float | None
    speedup_vs_compile: float | None
    median_ms: float | None
    roofline_fraction: float | None
    is_best: bool  # it became the best when committed
    reused: bool  # found already committed (a resumed run, or a repeated source): not evaluated again
    repeat: bool  # the same source was already an attempt of this run
    ci_low_ms: float | None
    ci_high_ms: float | None
    timing_measured: bool
    detail: str  # the first line of the evaluator's message


class TurnUsage(TypedDict):
    """One model call."""

    turn: int
    prompt_tokens: int | None  # as reported by the server
    completion_tokens: int | None
    context_tokens: int  # our approximation of what was sent (see agent.loop.context)
    seconds: float
    # since the trajectory's schema 2 (absent from turns checkpointed before it: read with .get)
    cached_tokens: int | None  # the part of the prompt the server read from its cache, as reported
    tokens: int  # what the turn added to tokens_used (server counts; approximations where absent)
    cost_usd: float | None  # dollars at the run's price (agent/cost.py); None: no price; 0 for the built-in policy
    # a request sent ahead of its step's fan-in (agent/loop/ahead.py): "used" (its reply was this
    # turn), "unused" (nobody took its reply: the run's tokens and cost, no conversation's; turn 0)
    ahead: NotRequired[str]


class Lineage(TypedDict):
    """One conversation of a search: what its next candidate is asked from, and its latest outcome."""

    id: int  # its number in the run (0 .. width-1 at the first step; a fork takes the next free one)
    seed: int | None  # sent with its requests (None at width 1: the request as it always was)
    parent: int | None  # the attempt its next candidate answers (None: the task itself)
    messages: list[Message]
    proposal: Proposal | None
    record: dict[str, Any] | None
    latest: AttemptSummary | None
    phases: dict[str, str]
    improved: bool  # its latest candidate became the run's best
    # the answer to its latest outcome, where a request was sent ahead with it (agent/loop/ahead.py):
    # the next step's conversations of this lineage take it, as sent
    answer: NotRequired[Message | None]


def gather(old: list[dict[str, Any]] | None, new: list[dict[str, Any]] | None) -> list[dict[str, Any]]:
    """The fan-in's reducer: each branch adds its report; None (select, once it has read them) empties it."""
    return [] if new is None else list(old or []) + list(new)


class AgentState(TypedDict, total=False):
    # the run
    run_id: str
    problem: str  # path of the reference module
    problem_hash: str
    entry: str
    language: str
    model: str
    workspace: str  # the problem's workspace directory
    # the conversation
    messages: list[Message]  # everything, untrimmed: the trajectory
    usage: list[TurnUsage]
    tokens_used: int  # prompt + completion tokens over the run (server counts; approximations where absent)
    billed_turns: int  # the turns (usage entries) whose tokens and cost an attempt's commit already carries
    # the latest step
    proposal: Proposal | None
    record: dict[str, Any] | None  # the evaluator's result record of the latest attempt (Result.to_dict())
    latest: AttemptSummary | None
    phases: dict[str, str]  # what each phase made of the latest proposal: compile/test/profile -> outcome
    improved: bool  # the latest attempt became this run's best
    # progress
    attempts: list[AttemptSummary]
    best: AttemptSummary | None
    attempts_used: int  # evaluated attempts plus malformed replies
    format_errors: int
    since_improvement: int
    baseline: dict[str, Any]  # eager/compile/floor times as the evaluator last reported them
    wall_s: float  # time spent in this run over all sessions
    judge_s: float  # ... of it, with some evaluator judging a candidate (over several devices: any of them busy)
    stop_reason: str | None
    # the search (agent/loop/beam.py)
    lineages: list[Lineage]  # the conversations the next step asks, best first
    next_lineage: int  # the number a fork takes
    step_size: int  # candidates in the latest step
    branches: Annotated[list[dict[str, Any]], gather]  # the step's reports (the fan-in); empty between steps


class Branch(AgentState, total=False):
    """The candidate subgraph's state: the run's keys as the step began, its lineage's over them."""

    lineage: int
    seed: int | None
    parent: int | None
    origin: dict[str, int]  # the run's counters as the step began: what this branch adds is read against them
    judged: list[float] | None  # [start, end] of its evaluation (time.monotonic), for the GPU's busy share


def initial_state(*, run_id: str, problem: str, problem_hash: str, entry: str, language: str, model: str,
                  workspace: str, baseline: dict[str, Any]) -> AgentState:
    return AgentState(
        run_id=run_id, problem=problem, problem_hash=problem_hash, entry=entry, language=language,
        model=model, workspace=workspace, messages=[], usage=[], tokens_used=0, billed_turns=0, proposal=None, record=None,
        latest=None, phases={}, improved=False, attempts=[], best=None, attempts_used=0, format_errors=0,
        since_improvement=0, baseline=baseline, wall_s=0.0, judge_s=0.0, stop_reason=None,
        lineages=[], next_lineage=0, step_size=0, branches=[],
    )


def latest_record(state: AgentState) -> dict[str, Any]:
    """The latest attempt's result record: the nodes after `compile` need one (ValueError otherwise)."""
    record = state["record"]
    if record is None:
        raise ValueError("no evaluated attempt in the state")
    return record


def latest_attempt(state: AgentState) -> AttemptSummary:
    """The latest attempt's summary: the nodes after `compile` need one (ValueError otherwise)."""
    latest = state["latest"]
    if latest is None:
        raise ValueError("no evaluated attempt in the state")
    return latest
