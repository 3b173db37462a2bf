"""The graph's nodes: draft, refine, select, decide, stop_untimed, and the candidate subgraph's
ask, compile, test, profile and report; and the routing between them.

Each node takes the state (JSON data) and the run's `Session` (agent/loop/session.py: live objects,
passed by LangGraph as the run context, never checkpointed) and returns the keys it changes. The
candidate subgraph's nodes take a `Branch` (one lineage's step, agent/loop/beam.py).

- draft poses the task (system prompt and task message) to each lineage of the first step;
- ask gets the lineage's next proposal from the model;
- compile evaluates the proposal (once: see below) and commits the attempt to the workspace (an
  exception out of the evaluator is committed as an attempt with verdict error, an evaluator fault);
  it records whether the candidate built (verdicts compile_error and rejected stop here, and so
  does error, an evaluator fault: nothing was judged);
- test reads the correctness outcome from that record (ok goes on to profile);
- profile reads the timing and roofline, and moves the branch's view of the best;
- report hands the branch's outcome to the fan-in, select, which merges the step into the run;
- decide applies the budgets and the early-stopping rules; it ends the run, except where nothing
  is timed (a CPU): there stop_untimed ends it at the first correct kernel, as nothing could tell
  a faster one from it (config `stop_untimed`, on by default);
- refine answers the kept lineages' latest proposals and sends the next step out.

Idempotence: LangGraph checkpoints after every node (the subgraph's too), and a resumed run re-runs
the node that was interrupted from its start. The only side effects are the model call (ask: a
repeated call costs tokens, nothing else) and evaluate+commit (compile). Before evaluating,
compile looks the source hash up among this run's commits in the workspace; a candidate already
committed is never evaluated or committed again: its record is read back from the commit (except
after an evaluator fault, verdict error: that source was never judged, and is evaluated again).
"""
from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any, cast

from langgraph.runtime import Runtime

from agent.config import AgentConfig, public
from agent.cost import spend
from agent.loop import beam
from agent.loop.ahead import send_ahead, unused_turns, with_unused
from agent.loop.session import Session
from agent.loop.state import AgentState, AttemptSummary, Branch, latest_attempt, latest_record
from agent.loop.turns import ask_model, feedback_message, first_line, system_text, task_text
from agent.workspace.root import ProblemRepo
from agent.workspace.attempt import Attempt, beats, beats_eager
from tools.record import TimeStats, Verdict, describe_exception, fault_result

BUILD_FAILURES = {Verdict.COMPILE_ERROR.value, Verdict.REJECTED.value}
NOT_JUDGED = {Verdict.ERROR.value}  # an evaluator fault: nothing to test or profile; the source may come again
TRAJECTORY_SCHEMA = 3  # 2: each turn's cached_tokens, tokens and cost_usd; the run's cost_usd and price;
# 3: `lineage` (the conversation `messages` is: the run's lead, or an attempt's own) and, in a search
# wider than one, `lineages` (each conversation of the latest step: id, parent attempt, messages)


Node = Runtime[Session]


# --- nodes -------------------------------------------------------------------------------------


def draft(state: AgentState, runtime: Node) -> dict[str, Any]:
    """Pose the task (system prompt and task message) to each lineage of the first step."""
    ctx = runtime.context
    messages = [{"role": "system", "content": system_prompt(state, ctx), "_kind": "system"},
                {"role": "user", "content": task_prompt(state, ctx), "_kind": "task"}]
    first = beam.first_lineages(state, ctx.config, messages)
    if ctx.ahead is not None:
        ctx.ahead.board.start((state["run_id"], state.get("attempts_used", 0)), state.get("best"))
    return {"messages": messages, **first}


def ask(state: Branch, runtime: Node) -> dict[str, Any]:
    """The lineage's next proposal from the model."""
    return ask_model(state, runtime.context, list(state["messages"]))


def compile(state: Branch, runtime: Node) -> dict[str, Any]:  # noqa: A001 (the diagram's name)
    """Build, test and time the proposal through the evaluator, and commit it as an attempt."""
    ctx = runtime.context
    proposal = state["proposal"]
    updates: dict[str, Any] = {"attempts_used": state["attempts_used"] + 1, "improved": False}
    if proposal is None or proposal["kind"] != "submission":
        reason = proposal["reason"] if proposal else "no proposal"
        ctx.log(f"turn {len(state.get('usage', []))}: malformed reply ({first_line(reason, 100)}); "
                f"{updates['attempts_used']}/{ctx.config.max_attempts} attempts used")
        return {**updates, "format_errors": state.get("format_errors", 0) + 1, "record": None, "latest": None,
                "phases": {"compile": "format_error"}}

    source, digest = cast(str, proposal["source"]), cast(str, proposal["source_hash"])  # a submission has both
    turns = list(state.get("usage") or [])
    # the turns since the last commit are this attempt's (a malformed reply's land on the next attempt)
    tokens, cost = spend(turns[state.get("billed_turns", 0):])
    updates["billed_turns"] = len(turns)
    # Each candidate on an evaluator of its own for its whole evaluation and its commit (agent/loop/
    # judges.py: one per device; timing must have the card to itself, docs/integrity.md), commits one
    # at a time (the session's judging lock), and a source two branches of a wide step send
    # (docs/search.md) is judged once: under its claim, the second finds the first's commit
    with ctx.judges.claim(digest):
        with ctx.judging:
            done = committed_attempt(ctx.repo, digest, state["run_id"])
        if done is None:
            with ctx.judges.take() as evaluator:
                started = time.monotonic()  # not the wait for a free evaluator
                try:
                    result = evaluator.evaluate(source)
                except Exception as exc:  # noqa: BLE001 - an evaluator fault is an attempt with verdict error, not the run's end
                    ctx.log(f"evaluator fault: {describe_exception(exc)}")
                    result = fault_result(exc, problem=state["problem"], source=source)
                    result.problem_hash = state["problem_hash"]
                ended = time.monotonic()
                updates["judge_s"] = state.get("judge_s", 0.0) + (ended - started)
                updates["judged"] = [started, ended]
                # committed before its card is free: on one device no evaluation overlaps a commit, as before
                with ctx.judging:
                    attempt = ctx.repo.commit_attempt(source, result, model=ctx.model.name, run_id=state["run_id"],
                                                      summary=change_summary(state), trajectory=trajectory_text(state, ctx),
                                                      spend={"tokens": tokens, "cost_usd": cost,
                                                             "run_cost_usd": spend(turns)[1]},
                                                      lineage=(state.get("lineage", 0), state.get("parent")))
            record = result.to_dict()
        else:
            record = ctx.repo.record(done)
            attempt = done
    seen = {a["attempt"] for a in state.get("attempts", [])}
    summary = attempt_summary(attempt, record, reused=done is not None, repeat=attempt.number in seen)
    attempts = list(state.get("attempts", []))
    if not summary["repeat"]:
        attempts.append(summary)
    built = record["verdict"] not in BUILD_FAILURES | NOT_JUDGED
    return {**updates, "record": record, "latest": summary, "attempts": attempts,
            "phases": {"compile": "built" if built else record["verdict"]}}


def test(state: Branch, runtime: Node) -> dict[str, Any]:
    """Correctness: the evaluator's trials against the reference (read from the record)."""
    record = latest_record(state)
    outcome = "passed" if record["verdict"] == Verdict.OK.value else record["verdict"]
    return {"phases": {**state["phases"], "test": outcome}}


def profile(state: Branch, runtime: Node) -> dict[str, Any]:
    """Timing and roofline of a correct kernel; a faster one becomes this run's best."""
    record, latest = latest_record(state), latest_attempt(state)
    timing = record.get("candidate_time") or {}
    if timing.get("measured"):
        outcome = "timed"
    elif timing_unavailable(record):
        outcome = "untimed"
    else:
        outcome = f"not measured ({timing.get('note', '')})"
    best = state.get("best")
    improved = best is None or beats(beam.as_attempt(latest), beam.as_attempt(best))
    return {"phases": {**state["phases"], "profile": outcome}, "baseline": baseline_from(record, state.get("baseline")),
            "best": latest if improved else best, "improved": improved}


def report(state: Branch, runtime: Node) -> dict[str, Any]:
    """The branch's outcome, for the fan-in; with config `ahead`, its lineage's next request is
    sent now where the lineage looks kept and another step can follow (agent/loop/ahead.py)."""
    ctx = runtime.context
    answer = send_ahead(state, ctx) if ctx.ahead is not None and another_step(state, ctx) else None
    return {"branches": [beam.report(state, answer)]}


def another_step(state: Branch, ctx: Session) -> bool:
    """Whether a step can follow this one as far as a branch can tell: attempts are left after it,
    and no untimed correct kernel ends the run (stop_untimed)."""
    config, step_size = ctx.config, state.get("step_size")
    if step_size is None:  # a branch checkpointed by a ratchet before `ahead`: nothing to tell
        return False
    if config.max_attempts - state["origin"]["attempts_used"] - step_size <= 0:
        return False
    record = state.get("record")
    return not (config.stop_untimed and record is not None and record["verdict"] == Verdict.OK.value
                and timing_unavailable(record))


def select(state: AgentState, runtime: Node) -> dict[str, Any]:
    """The fan-in: the step's candidates merged into the run, its lineages ranked best first; and
    the requests sent ahead that nobody took and whose replies are in, counted as the run's."""
    merged = beam.select(state)
    unused = unused_turns(runtime.context)
    return with_unused(merged, unused) if unused else merged  # the run's tokens and cost, in no attempt's


def decide(state: AgentState, runtime: Node) -> dict[str, Any]:
    """Spend or stop: the budgets and early-stopping rules, checked after every proposal."""
    ctx = runtime.context
    config = ctx.config
    wall_s, since = _clock(state, ctx)
    best = state.get("best")
    reason = None
    if state["attempts_used"] >= config.max_attempts:
        reason = f"attempt budget spent ({state['attempts_used']} of {config.max_attempts})"
    elif state.get("tokens_used", 0) >= config.max_tokens:
        reason = f"token budget spent ({state['tokens_used']} of {config.max_tokens})"
    elif wall_s >= config.max_wall_s:
        reason = f"wall-time budget spent ({wall_s:.0f} s of {config.max_wall_s:.0f} s)"
    elif best and (target := _roofline_stop(best, state.get("baseline") or {}, config)) is not None:
        reason = f"best reached {best['roofline_fraction']:.0%} of the roofline floor (target {target:.0%})"
    elif config.patience and since >= config.patience:
        reason = f"no improvement in {since} attempts"
    ctx.log(progress_line(state, config))
    return {"wall_s": wall_s, "since_improvement": since, "stop_reason": reason}


def _roofline_stop(best: AttemptSummary, baseline: dict[str, Any], config: AgentConfig) -> float | None:
    """The roofline target the best has reached, or None: a memory-bound problem's target is
    `memory_roofline_target`, any other's `roofline_target` (0: no roofline stop); and never before
    the best beat eager PyTorch beyond noise (agent.workspace.attempt.beats_eager, the kept-eager rule)."""
    fraction = best.get("roofline_fraction")
    target = config.memory_roofline_target if baseline.get("bound") == "memory" else config.roofline_target
    if not target or fraction is None or fraction < target:
        return None
    eager = TimeStats(measured=baseline.get("eager_ms") is not None, median_ms=baseline.get("eager_ms"),
                      ci_low_ms=baseline.get("eager_ci_low_ms"))
    return target if beats_eager(beam.as_attempt(best), eager) else None


def stop_untimed(state: AgentState, runtime: Node) -> dict[str, Any]:
    """Where nothing is timed (a CPU), nothing can tell a faster kernel from this correct one: the
    first correct kernel ends the run, and one line says why."""
    ctx = runtime.context
    wall_s, since = _clock(state, ctx)
    reason = (f"{timing_unavailable(latest_record(state))}: stopping at the first correct kernel; "
              "run on a GPU to optimize for speed")
    ctx.log(progress_line(state, ctx.config))
    ctx.log(reason)
    return {"wall_s": wall_s, "since_improvement": since, "stop_reason": reason}


def refine(state: AgentState, runtime: Node) -> dict[str, Any]:
    """Answer the kept lineages' latest proposals with their outcomes: the next step's lineages."""
    ctx = runtime.context
    step = beam.next_lineages(state, ctx.config, lambda view: feedback_message(view, ctx))
    if ctx.ahead is not None:  # a request sent ahead for a lineage that does not go on is unused
        ctx.ahead.keep({one["id"] for one in step["lineages"]})
        ctx.ahead.board.start((state["run_id"], state["attempts_used"]), state.get("best"))
    return step


# --- routing -----------------------------------------------------------------------------------


def after_compile(state: AgentState) -> str:
    return "built" if state["phases"].get("compile") == "built" else "failed"


def after_test(state: AgentState) -> str:
    return "correct" if state["phases"].get("test") == "passed" else "wrong"


def after_select(state: AgentState, runtime: Node) -> str:
    """untimed: nothing on this device times a kernel, and the run stops at the first correct one
    (the step's lead lineage is a correct one whenever the step has any)."""
    untimed = state["phases"].get("profile") == "untimed" and runtime.context.config.stop_untimed
    return "untimed" if untimed else "decide"


def after_decide(state: AgentState) -> str:
    return "finish" if state.get("stop_reason") else "refine"


# --- helpers -----------------------------------------------------------------------------------


def change_summary(state: AgentState) -> str:
    """The model's own words on the submitted change: the first line of the text of the reply
    that made the submission ("" if it sent only the tool call), for the attempt's commit body."""
    proposal = state.get("proposal")
    call_id = proposal["tool_call_id"] if proposal else None
    for message in reversed(state.get("messages") or []):
        if message.get("role") == "assistant" and any(c.get("id") == call_id for c in message.get("tool_calls") or []):
            content = message.get("content")
            return first_line(content, 200) if isinstance(content, str) else ""
    return ""


def timing_unavailable(record: dict[str, Any]) -> str | None:
    """Why no kernel is timed where this record was made (None: the device times kernels). On a CPU,
    kernels run in Triton's interpreter and the evaluator reports timing as unavailable."""
    device = str((record.get("environment") or {}).get("device") or "")
    if (record.get("candidate_time") or {}).get("measured") or device.startswith("cuda"):
        return None
    return f"timing is unavailable on {device or 'this device'}"


def _clock(state: AgentState, ctx: Session) -> tuple[float, int]:
    """The run's wall time so far and attempts since the last new best, after this step."""
    wall_s = state.get("wall_s", 0.0) + ctx.tick()
    since = 0 if state.get("improved") else state.get("since_improvement", 0) + max(1, state.get("step_size", 1))
    return wall_s, since


def committed_attempt(repo: ProblemRepo, source_hash: str, run_id: str) -> Attempt | None:
    """The attempt of this run already committed with this exact source, if any. One that ended in
    an evaluator fault (verdict error) was never judged: that source is evaluated again."""
    return next((a for a in reversed(repo.attempts()) if a.source_sha256 == source_hash and a.run_id == run_id
                 and a.verdict.value not in NOT_JUDGED), None)


def attempt_summary(attempt: Attempt, record: dict[str, Any], *, reused: bool, repeat: bool) -> AttemptSummary:
    timing = record.get("candidate_time") or {}
    return AttemptSummary(
        attempt=attempt.number, sha=attempt.sha, source_hash=attempt.source_sha256, verdict=record["verdict"],
        speedup_vs_eager=record.get("speedup_vs_eager"), speedup_vs_compile=record.get("speedup_vs_compile"),
        median_ms=timing.get("median_ms"), roofline_fraction=(record.get("roofline") or {}).get("achieved_fraction"),
        is_best=attempt.became_best, reused=reused, repeat=repeat, ci_low_ms=timing.get("ci_low_ms"),
        ci_high_ms=timing.get("ci_high_ms"), timing_measured=bool(timing.get("measured")),
        detail=first_line(record.get("message")),
    )


def baseline_from(record: dict[str, Any], previous: dict[str, Any] | None) -> dict[str, Any]:
    """Eager, torch.compile and roofline figures as the latest record reports them."""
    baseline = dict(previous or {})
    eager, compiled, roof = (record.get(k) or {} for k in ("eager_time", "compile_time", "roofline"))
    if eager.get("measured"):
        baseline["eager_ms"] = eager.get("median_ms")
        baseline["eager_ci_low_ms"] = eager.get("ci_low_ms")
    if compiled.get("measured"):
        baseline["compile_ms"] = compiled.get("median_ms")
    if roof.get("measured") or roof.get("floor_ms") is not None:
        baseline.update(floor_ms=roof.get("floor_ms"), bytes_moved=roof.get("bytes_moved"), flops=roof.get("flops"),
                        bound=roof.get("bound"))
    baseline["measured"] = baseline.get("eager_ms") is not None
    return baseline


def empty_baseline() -> dict[str, Any]:
    return {"eager_ms": None, "eager_ci_low_ms": None, "compile_ms": None, "floor_ms": None, "bytes_moved": None,
            "flops": None, "bound": None, "measured": False}


def system_prompt(state: AgentState, ctx: Session) -> str:
    return system_text(ctx.evaluator.problem, language=state["language"], gpu=ctx.gpu, entry=state["entry"],
                       auxiliary=ctx.config.auxiliary_tools, precision=ctx.config.precision,
                       counters=ctx.counters is not None)


def task_prompt(state: AgentState, ctx: Session) -> str:
    baseline = {**empty_baseline(), **(state.get("baseline") or {})}
    return task_text(ctx.evaluator.problem, entry=state["entry"], problem_name=Path(state["problem"]).name,
                     language=state["language"], baseline=baseline, max_attempts=ctx.config.max_attempts)


def progress_line(state: AgentState, config: AgentConfig) -> str:
    used = f"[{state['attempts_used']}/{config.max_attempts}]"
    latest, best = state.get("latest"), state.get("best")
    if latest is None:
        now = "malformed reply"
    else:
        now = f"attempt {latest['attempt']}: {latest['verdict']}"
        if latest["verdict"] == Verdict.OK.value and latest["speedup_vs_eager"] is not None:
            now += f" {latest['speedup_vs_eager']:.2f}x"
        if latest["reused"]:
            now += " (already committed)"
        if latest["verdict"] not in (Verdict.OK.value, Verdict.INCORRECT.value) and latest.get("detail"):
            detail = latest["detail"]  # why it failed, so a batch log says more than the verdict's name
            now += f" ({detail if len(detail) <= 160 else detail[:157] + '...'})"
    if best is None:
        so_far = "no correct kernel yet"
    elif best["speedup_vs_eager"] is not None:
        so_far = f"run's best {best['speedup_vs_eager']:.2f}x vs eager (attempt {best['attempt']})"
    else:
        so_far = f"run's best: attempt {best['attempt']} (not timed)"
    # "new best": the workspace's (the attempt's commit says so too), not merely this run's first correct kernel
    return f"{used} {now}; {so_far}" + ("  new best" if latest is not None and latest.get("is_best") else "")


def trajectory_text(state: AgentState, ctx: Session) -> str:
    """The conversation and its bookkeeping as JSON: saved in the workspace after every step."""
    lineages = state.get("lineages") or []
    data = {
        "schema": TRAJECTORY_SCHEMA, "run_id": state.get("run_id"), "problem": state.get("problem"),
        "problem_hash": state.get("problem_hash"), "model": state.get("model"), "language": state.get("language"),
        "config": public(ctx.config), "tools": [t["function"]["name"] for t in ctx.tools],
        "messages": state.get("messages", []), "usage": state.get("usage", []),
        "tokens_used": state.get("tokens_used", 0), "cost_usd": spend(state.get("usage") or [])[1],
        "price": ctx.price.to_dict() if ctx.price is not None else None,
        "attempts": state.get("attempts", []), "best": state.get("best"),
        "format_errors": state.get("format_errors", 0), "stop_reason": state.get("stop_reason"),
        "lineage": state.get("lineage", lineages[0]["id"] if lineages else 0),
    }
    if len(lineages) > 1:
        data["lineages"] = [{"id": one["id"], "parent": one["parent"], "messages": one["messages"]} for one in lineages]
    return json.dumps(data, indent=1) + "\n"
