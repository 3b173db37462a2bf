"""The search: a step asks `width` lineages at once (the fan-out), each runs the candidate subgraph
(ask, compile, test, profile) on its own, and `select` (the fan-in) merges what they report.

- **Fan-out.** `draft` and `refine` leave the step's lineages in the state; `fan_out` sends each
  to the candidate subgraph as a `Branch` (LangGraph's `Send`, the map-reduce form). The branches of
  one step run in LangGraph's thread pool: while one candidate is judged, another lineage's request
  is still out, so the model and the GPU overlap. At width 1 the one branch runs inline, as the
  single line of attempts always did.
- **Fan-in.** Each branch reports into `branches`; `select` adds the reports' turns, tokens,
  attempts and evaluation time to the run's, moves the run's best by the one rule
  (agent.workspace.attempt.beats: head to head, beyond noise), and ranks the step's lineages.
- **Beam.** `next_lineages` keeps the best `beam` lineages (config `beam`; 0: half the width, at
  least one) and fills the width from them, best first, round robin: the first child of a lineage
  continues it, every further child is a fork (a new lineage number, its conversation copied), and
  each is answered with its lineage's latest outcome before it is asked again.
- **Seeds.** At width 1 a request carries no seed (as before). Wider, lineage k's requests carry
  `seed_base(run_id) + k`, so branches that share a conversation still differ where the server
  honours seeds; the built-in policy gives each concurrent branch a different configuration.
- **Resume.** LangGraph keeps a finished branch's report and the subgraph's checkpoints: an
  interrupted step re-runs only its unfinished branches, each from its last finished node.
- **GPU busy.** Branches record when their evaluation ran; a step adds the union of those
  intervals to `judge_s`, so overlapping evaluations are not counted twice.
"""
from __future__ import annotations

import zlib
from typing import Any

from langgraph.types import Send

from agent.config import AgentConfig
from agent.loop.state import AgentState, AttemptSummary, Branch, Lineage, Message
from agent.workspace.attempt import Attempt, beats
from tools.record import Verdict

CANDIDATE = "candidate"  # the graph's name for the candidate subgraph
RUN_KEYS = ("run_id", "problem", "problem_hash", "entry", "language", "model", "workspace", "usage", "tokens_used",
            "billed_turns", "attempts", "best", "attempts_used", "format_errors", "baseline", "judge_s")
COUNTERS = ("usage", "attempts", "attempts_used", "format_errors", "tokens_used")


def kept(config: AgentConfig) -> int:
    """The lineages carried to the next step: config `beam`, or half the width (at least one)."""
    return config.beam or max(1, config.width // 2)


def seed_base(run_id: str) -> int:
    return zlib.crc32(run_id.encode()) & 0x3FFFFFFF


def lineage(number: int, messages: list[Message], *, run_id: str, width: int, parent: int | None) -> Lineage:
    return Lineage(id=number, seed=None if width == 1 else seed_base(run_id) + number, parent=parent,
                   messages=messages, proposal=None, record=None, latest=None, phases={}, improved=False)


def first_lineages(state: AgentState, config: AgentConfig, messages: list[Message]) -> dict[str, Any]:
    """The first step: `width` lineages (fewer where the attempt budget is smaller), each posed the task."""
    n = max(1, min(config.width, config.max_attempts - state.get("attempts_used", 0)))
    return {"lineages": [lineage(k, list(messages), run_id=state["run_id"], width=config.width, parent=None)
                         for k in range(n)], "next_lineage": n}


def fan_out(state: AgentState) -> list[Send]:
    """One candidate subgraph per lineage of the step."""
    return [Send(CANDIDATE, branch(state, one, first=i == 0)) for i, one in enumerate(state["lineages"])]


def branch(state: AgentState, one: Lineage, *, first: bool) -> Branch:
    """A lineage's branch: the run's keys as the step begins, the lineage's conversation over them.
    The turns no attempt has carried yet (a malformed reply's) go to the first branch's attempt."""
    values: dict[str, Any] = dict(state)
    run: dict[str, Any] = {k: values[k] for k in RUN_KEYS if k in values}
    if not first:
        run["billed_turns"] = len(values.get("usage") or [])
    origin = {k: (len(values.get(k) or []) if k in ("usage", "attempts") else int(values.get(k) or 0)) for k in COUNTERS}
    out: dict[str, Any] = {**run, "lineage": one["id"], "seed": one["seed"], "parent": one["parent"],
                           "messages": list(one["messages"]), "proposal": None, "record": None, "latest": None,
                           "phases": {}, "improved": False, "origin": origin, "judged": None,
                           "step_size": len(state["lineages"])}
    return Branch(**out)  # type: ignore[typeddict-item]


def report(state: Branch, answer: Message | None = None) -> dict[str, Any]:
    """The branch's report to the fan-in: its lineage as it now stands and what it added to the run.
    `answer`: the answer its next request was sent ahead with (agent/loop/ahead.py), if one was."""
    origin = state["origin"]
    one = Lineage(id=state["lineage"], seed=state["seed"], parent=state["parent"], messages=state["messages"],
                  proposal=state.get("proposal"), record=state.get("record"), latest=state.get("latest"),
                  phases=state.get("phases") or {}, improved=bool(state.get("improved")), answer=answer)
    return {"lineage": one, "usage": list(state.get("usage") or [])[origin["usage"]:],
            "attempts": list(state.get("attempts") or [])[origin["attempts"]:],
            "attempts_used": state["attempts_used"] - origin["attempts_used"],
            "format_errors": state.get("format_errors", 0) - origin["format_errors"],
            "tokens_used": state.get("tokens_used", 0) - origin["tokens_used"],
            "best": state.get("best"), "baseline": state.get("baseline"), "judged": state.get("judged"),
            "billed": state.get("billed_turns", 0) == len(state.get("usage") or [])}


def select(state: AgentState) -> dict[str, Any]:
    """The fan-in: the step's reports merged into the run, and its lineages ranked, best first.

    The run's best moves as the workspace's does: the step's new correct attempts, in the order they
    were committed, each against the best so far by the noise rule (which is not transitive, so the
    order matters). An attempt two branches both reached (the same source: judged once, reused by
    the other) is counted once. A lineage's `improved` says whether its latest attempt is the new best."""
    reports = sorted(state.get("branches") or [], key=lambda r: rank(r["lineage"]))
    previous = state.get("best")
    known = {a["attempt"] for a in state.get("attempts") or []}
    new: dict[int, AttemptSummary] = {}
    for r in reports:
        for a in r["attempts"]:
            if a["attempt"] not in known:
                new.setdefault(a["attempt"], a)
    best = previous
    for number in sorted(new):
        a = new[number]
        if a["verdict"] == Verdict.OK.value and (best is None or beats(as_attempt(a), as_attempt(best))):
            best = a
    improved = best is not None and (previous is None or best["attempt"] != previous["attempt"])
    usage = list(state.get("usage") or [])
    for r in reports:
        usage += r["usage"]
    attempts = list(state.get("attempts") or []) + [new[n] for n in sorted(new)]
    baseline = dict(state.get("baseline") or {})
    for r in reports:
        baseline.update({k: v for k, v in (r["baseline"] or {}).items() if v is not None})
    lineages = []
    for r in reports:
        latest = r["lineage"]["latest"]
        lineages.append({**r["lineage"], "improved": bool(improved and latest and best
                                                           and latest["attempt"] == best["attempt"])})
    lead = lineages[0]
    # one branch (width 1): a malformed reply's turns wait for the next attempt, as they always did;
    # wider, each attempt carries its own branch's turns (a malformed reply's count in the run only)
    billed = len(usage) if len(reports) > 1 or reports[0]["billed"] else state.get("billed_turns", 0)
    return {
        "usage": usage, "billed_turns": billed, "attempts": attempts, "best": best, "improved": improved,
        "tokens_used": state.get("tokens_used", 0) + sum(r["tokens_used"] for r in reports),
        "attempts_used": state.get("attempts_used", 0) + sum(r["attempts_used"] for r in reports),
        "format_errors": state.get("format_errors", 0) + sum(r["format_errors"] for r in reports),
        "judge_s": state.get("judge_s", 0.0) + busy_seconds([r["judged"] for r in reports if r["judged"]]),
        "baseline": baseline, "lineages": lineages, "step_size": len(reports),
        "messages": lead["messages"], "proposal": lead["proposal"], "record": lead["record"], "latest": lead["latest"],
        "phases": lead["phases"], "branches": None,
    }


def next_lineages(state: AgentState, config: AgentConfig, answer) -> dict[str, Any]:
    """The next step's lineages: the best `kept(config)` of this step's, forked round robin to fill
    the width (or what is left of the attempt budget). `answer(view)` is the feedback message for a
    lineage's latest outcome, given the run's state with that lineage's keys over it."""
    n = max(1, min(config.width, config.max_attempts - state["attempts_used"]))
    keep = state["lineages"][:kept(config)]
    # a lineage whose next request went ahead keeps the answer it was sent with (agent/loop/ahead.py)
    answers = [one.get("answer") or answer({**state, **{k: v for k, v in one.items() if k != "id"}}) for one in keep]
    taken: set[int] = set()
    number = state.get("next_lineage", len(state["lineages"]))
    out: list[Lineage] = []
    for i in range(n):
        parent = keep[i % len(keep)]
        k = parent["id"]
        if k in taken:
            k, number = number, number + 1
        taken.add(k)
        latest = parent["latest"]
        out.append(lineage(k, list(parent["messages"]) + [answers[i % len(keep)]], run_id=state["run_id"],
                           width=config.width, parent=latest["attempt"] if latest else parent["parent"]))
    return {"lineages": out, "next_lineage": number}


def rank(one: Lineage) -> tuple[int, float, int]:
    """Best first: a timed correct candidate by its median, then an untimed correct one, then one
    that ran and failed, then a malformed reply; ties by lineage number."""
    latest = one["latest"]
    if latest is None:
        return 3, 0.0, one["id"]
    if latest["verdict"] == Verdict.OK.value:
        median = latest["median_ms"]
        return (0, median, one["id"]) if latest["timing_measured"] and median is not None else (1, 0.0, one["id"])
    return 2, 0.0, one["id"]


def busy_seconds(intervals: list[list[float]]) -> float:
    """The length of the union of [start, end] intervals."""
    total, end = 0.0, None
    for start, stop in sorted(intervals):
        if end is None or start > end:
            total += stop - start
            end = stop
        elif stop > end:
            total += stop - end
            end = stop
    return total


def as_attempt(summary: AttemptSummary) -> Attempt:
    return Attempt(number=summary["attempt"], sha=summary["sha"], verdict=Verdict(summary["verdict"]),
                   median_ms=summary["median_ms"], ci_low_ms=summary["ci_low_ms"], ci_high_ms=summary["ci_high_ms"],
                   timing_measured=summary["timing_measured"])
