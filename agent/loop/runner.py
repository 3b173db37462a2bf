"""One optimization run of one problem: open the workspace, the evaluator and the checkpointer,
then drive the graph (agent.loop.graph) to its end, saving the trajectory after every step (on the
workspace's trajectories ref, agent.workspace.trajectories, never as a commit on main).

Graph state is checkpointed with LangGraph's SQLite checkpointer after every node (durability
"sync": the checkpoint is on disk before the next node starts), in
`<workspace root>/.ratchet/<problem>.sqlite`, thread id = the run id. A small pointer file beside
it (`<problem>.run.json`) names the problem's latest run and whether it finished, which is how
`--resume` finds the run to continue.

The repository, the checkpointer and the pointer come from a store (agent.loop.run_store): by default
the workspace on this machine; a batch task on a cluster passes one that performs every read and
write in the driver's workspace (agent.batch.remote).
"""
from __future__ import annotations

import secrets
import sys
import time
from collections.abc import Callable
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agent.config import AgentConfig
from agent.cost import BUILTIN, spend
from agent.loop.ahead import Ahead, unused_turns, with_unused
from agent.loop.counters import CounterCalls
from agent.loop.judges import Judges
from agent.loop.graph import compile_graph, steps_needed
from agent.loop.kept_eager import kept_eager
from agent.loop.ray_judges import RayJudging
from agent.model import ModelClient, ModelError
from agent.loop.nodes import empty_baseline, trajectory_text
from agent.loop.session import Session
from agent.loop.run_store import STATE_DIR, LocalStore, Store, pointer_path, read_json
from tools.env import target_name
from agent.loop.state import AgentState, initial_state
from agent.workspace.attempt import precision_conflict
from agent.workspace.repo import WorkspaceError
from agent.workspace.root import Workspace
from agent.cli.exit_codes import EXIT_FOUND, EXIT_MODEL, EXIT_NONE_CORRECT
from tools.record import Verdict
from tools.toolcalls import tool_schemas

__all__ = ["STATE_DIR", "NothingToResume", "RunResult", "optimize", "resumable_run", "run_summary", "new_run_id"]


class NothingToResume(Exception):
    """--resume found no interrupted run for this problem; str() is one line."""


@dataclass
class RunResult:
    summary: dict[str, Any]
    exit_code: int


def new_run_id() -> str:
    return time.strftime("%Y%m%d-%H%M%S") + "-" + secrets.token_hex(3)


def optimize(problem: Path, config: AgentConfig, model: ModelClient, *, resume: bool = False,
             log: Callable[[str], None] | None = None, store: Store | None = None, pools: Any = None,
             ray: RayJudging | None = None) -> RunResult:
    """Run (or resume) the agent on one problem. Raises ProblemError, WorkspaceError, NothingToResume.
    `store`: where the repository, checkpoints and run pointer live (default: config.workspace here).
    `pools`: a tools.processes.warm.WarmPools whose workers, started ahead, the evaluator takes (a batch slot's).
    `ray`: judge on a Ray cluster's GPUs (agent/loop/ray_judges.py; ClusterError, JudgesUnavailable)."""
    log = log or (lambda line: print(line, file=sys.stderr, flush=True))
    store = store or LocalStore(config.workspace)
    with ExitStack() as stack:
        # the evaluator first: an invalid problem gets no workspace
        # back to back: the built-in policy answers at once, and a wide step's candidates arrive together
        back_to_back = getattr(model, "answers_at_once", False) or config.width > 1
        remote: list[Any] = []
        if ray is not None:  # every judge an actor on the cluster (agent/loop/ray_judges.py), the run here
            from agent.loop.ray_judges import ray_judges

            device = "cpu" if config.device == "cpu" else "cuda:0"  # the GPU Ray gives each judge
            remote = stack.enter_context(ray_judges(problem, _options(config, device, back_to_back), config.entry,
                                                    ray, log))
            evaluator, judges = remote[0], Judges(remote)
        else:
            devices = run_devices(config)
            evaluator = stack.enter_context(_evaluator(problem, config, pools, back_to_back=back_to_back,
                                                       device=devices[0]))
            # one more evaluator per further device (`--device cuda:0,cuda:1`): a wide step's candidates judged at once
            judges = Judges([evaluator] + [stack.enter_context(_evaluator(problem, config, None, back_to_back=back_to_back,
                                                                         device=device)) for device in devices[1:]])
        opened = stack.enter_context(store.open(problem))
        repo = opened.repo
        conflict = precision_conflict(repo.attempts(), config.precision)
        if conflict:  # before any attempt: its times could not be compared with the best's
            raise WorkspaceError(f"{repo.path}: {conflict}")
        for other in judges.all[1:]:  # each further card's baselines before any candidate runs there (resume too)
            other.baseline()
        pointer = opened.read_pointer()
        if resume:
            run_id = _run_to_resume(problem, pointer)
        else:
            run_id = new_run_id()

        graph = compile_graph(opened.saver())
        run_config = {"configurable": {"thread_id": run_id},
                      "recursion_limit": steps_needed(config.max_attempts)}
        free = model.name == BUILTIN  # the built-in policy: no model, no tokens, $0
        # get_ncu_profile only where counters can be read confined (a GPU, bubblewrap, ncu): elsewhere
        # every call would only say why not
        unavailable = getattr(evaluator, "counters_unavailable", lambda: "not an evaluator of ratchet's")
        offer_counters = config.auxiliary_tools and config.max_counter_calls > 0 and unavailable() is None
        ctx = Session(config=config, model=model, evaluator=evaluator, repo=repo,
                           tools=tool_schemas(config.auxiliary_tools, counters=offer_counters),
                           gpu=config.gpu or getattr(evaluator, "target", None) or target_name(str(evaluator.device)),
                           log=log,
                           price=None if free else config.model_price(model.name), free=free, judges=judges)
        if offer_counters:
            ctx.counters = CounterCalls(judges, config.max_counter_calls)
        if config.ahead and config.width > 1:  # a single line has no fan-in to send ahead of
            ctx.ahead = Ahead()

        if resume:
            snapshot = graph.get_state(run_config)
            if not snapshot.values:
                raise NothingToResume(f"nothing to resume for {problem}: run {run_id} has no saved state")
            state = snapshot.values
            unknown = _foreign_nodes(graph, run_config)
            if unknown:  # saved by a ratchet whose graph had other nodes (before the search's fan-out)
                raise NothingToResume(f"cannot resume run {run_id}: it was saved by an older ratchet, at node "
                                      f"{', '.join(unknown)}, which this version's graph does not have; start a new run")
            if state.get("problem_hash") != evaluator.problem.hash:
                raise NothingToResume(f"cannot resume run {run_id}: {problem} changed since it began")
            graph_input = None  # continue from the last checkpoint
            log(f"resuming run {run_id}: {state.get('attempts_used', 0)} attempts used, next: "
                f"{', '.join(snapshot.next) or 'nothing (finished)'}")
        else:
            state = initial_state(run_id=run_id, problem=str(problem), problem_hash=evaluator.problem.hash,
                                  entry=config.entry, language=config.language, model=model.name,
                                  workspace=str(repo.path), baseline={**empty_baseline(), **evaluator.baseline()})
            graph_input = state
            opened.write_pointer({"run_id": run_id, "problem": str(problem), "finished": False,
                                  "started_at": time.strftime("%Y-%m-%dT%H:%M:%S%z")})
            log(f"run {run_id}: {problem} with {model.name}, workspace {repo.path}")

        error: ModelError | None = None
        # Save the trajectory whenever the run's conversation grows (after draft, and after each step's
        # fan-in: the lead lineage's) and at the end; each attempt's commit also carries its lineage's
        # conversation as it was judged (see nodes.compile).
        saved_key = _trajectory_key(state)
        try:
            for state in graph.stream(graph_input, run_config, context=ctx, stream_mode="values", durability="sync"):
                if _trajectory_key(state) != saved_key:
                    repo.save_trajectory(run_id, trajectory_text(state, ctx))
                    saved_key = _trajectory_key(state)
        except ModelError as exc:
            error = exc
            state = _with_finished_branches(graph.get_state(run_config)) or state
            log(f"model error: {exc}")
        if ctx.ahead is not None:  # requests sent ahead that no step took: paid for all the same
            if ctx.ahead.out():
                log(f"waiting for {ctx.ahead.out()} request(s) sent ahead and not needed: their tokens count")
            unused = unused_turns(ctx, wait=True)
            if unused:
                state = with_unused(state, unused)  # type: ignore[assignment,arg-type]
        if error is None and state.get("stop_reason"):
            repo.save_trajectory(run_id, trajectory_text(state, ctx))  # with the last attempt's outcome
        finished = error is None and bool(state.get("stop_reason"))
        if finished:
            opened.write_pointer({**(opened.read_pointer() or {}), "finished": True})
        summary = run_summary(state, repo, error=error)
        summary["price"] = ctx.price.to_dict() if ctx.price is not None else None
        if remote:  # where each judge was, and how many attempts it judged
            summary["judges"] = [j.summary() for j in remote]
        code = EXIT_MODEL if error else (EXIT_FOUND if state.get("best") else EXIT_NONE_CORRECT)
        summary["exit_code"] = code
        return RunResult(summary, code)


def _foreign_nodes(graph: Any, run_config: dict[str, Any]) -> list[str]:
    """Nodes the run's last checkpoint was headed for that this graph does not have: a run saved by
    a ratchet with another graph (the single line's `compile`, say). LangGraph computes `next` from
    this graph's own nodes (and finds nothing to run there), so the saved trigger channels
    (`branch:to:<node>`) are read instead."""
    saved = graph.checkpointer.get_tuple(run_config) if graph.checkpointer is not None else None
    versions = saved.checkpoint.get("channel_versions", {}) if saved is not None else {}
    return sorted({name.split(":", 2)[2] for name in versions if name.startswith("branch:to:")} - set(graph.nodes))


def _with_finished_branches(snapshot: Any) -> AgentState:
    """The state at the last checkpoint, with the reports of the step's branches that finished
    before another failed merged in (agent/loop/beam.py `select`), for the run's summary: their
    attempts are committed. The checkpoint itself is left as it is, for --resume."""
    from agent.loop.beam import CANDIDATE, select

    values = dict(snapshot.values or {})
    reports = [r for task in snapshot.tasks if task.name == CANDIDATE and isinstance(task.result, dict)
               for r in task.result.get("branches") or []]
    if values and reports:
        values.update(select({**values, "branches": reports}))  # type: ignore[typeddict-item]
    return values  # type: ignore[return-value]


def _trajectory_key(state: AgentState) -> tuple[int, str | None]:
    return len(state.get("messages") or []), state.get("stop_reason")


def run_summary(state: AgentState, repo, *, error: ModelError | None = None) -> dict[str, Any]:
    attempts = state.get("attempts", [])
    best = state.get("best")
    workspace_best = repo.best()
    return {
        "problem": state.get("problem"), "run_id": state.get("run_id"), "model": state.get("model"),
        "workspace": str(repo.path),
        "status": "model_error" if error else ("finished" if state.get("stop_reason") else "stopped"),
        "stop_reason": state.get("stop_reason"), "error": str(error) if error else None,
        "attempts": len(attempts), "attempts_used": state.get("attempts_used", 0),
        "format_errors": state.get("format_errors", 0),
        "correct": sum(a["verdict"] == Verdict.OK.value for a in attempts),
        "verdicts": [a["verdict"] for a in attempts],
        "best": None if best is None else {
            "attempt": best["attempt"], "sha": best["sha"], "speedup_vs_eager": best["speedup_vs_eager"],
            "speedup_vs_compile": best["speedup_vs_compile"], "median_ms": best["median_ms"],
            "roofline_fraction": best["roofline_fraction"], "timing_measured": best["timing_measured"],
            "kept_eager": _kept_eager(repo, best["attempt"]),
            "generalizes": best.get("generalizes"), "library": best.get("library"),
        },
        "best_path": str(repo.best_path) if workspace_best is not None else None,
        "workspace_best_attempt": workspace_best.number if workspace_best is not None else None,
        "tokens_used": state.get("tokens_used", 0), "model_calls": len(state.get("usage", [])),
        # the run's dollars, every session of it (agent/cost.py): None where it has no price, 0 for the built-in policy
        "cost_usd": spend(state.get("usage") or [])[1],
        "wall_s": round(state.get("wall_s", 0.0), 3),
        # the evaluator's share of the run's wall time (issue 40: how busy the GPU was, at most)
        "judge_s": round(state.get("judge_s", 0.0), 3),
        "judge_share": round(state.get("judge_s", 0.0) / state["wall_s"], 4) if state.get("wall_s") else None,
    }


def _kept_eager(repo, number: int) -> bool:
    """Whether the run's best, and eager PyTorch, were both timed and the best is not faster beyond
    noise (agent/loop/kept_eager.py): the run then ends with "no kernel faster than PyTorch"."""
    attempt = repo.attempt(number)
    return attempt is not None and kept_eager(attempt, repo.record(attempt))


def run_devices(config: AgentConfig) -> list[str | None]:
    """The devices a run judges on: `device` is one, or several separated by commas (`cuda:0,cuda:1`,
    checked by the command line: agent/cli/optimize.py); [None] where none is named (the default)."""
    if not config.device:
        return [None]
    return [d.strip() for d in config.device.split(",")]


def _evaluator(problem: Path, config: AgentConfig, pools: Any = None, *, back_to_back: bool = False,
               device: str | None = None):
    """`back_to_back`: the model answers at once (the built-in policy), so the next evaluation starts
    as soon as one ends. On a GPU a candidate worker takes longer to start (torch, a CUDA context:
    4.5-4.8 s on an H100, docs/evaluator.md "Worker start") than one evaluation of a small problem
    lasts (1.4-2.5 s), so two are kept started ahead instead of one; a
    model behind a server gives the one spare its answer's time to start. On the CPU a run stops
    at its first correct kernel (nothing is timed), where a second spare would start for nothing."""
    from tools import Evaluator
    from tools.env import resolve_device

    options = _options(config, device or resolve_device(None), back_to_back)  # the default device, where left to us
    return Evaluator(problem, options, entry=config.entry, pool=pools.for_options(options) if pools else None)


def _options(config: AgentConfig, device: str, back_to_back: bool):
    from tools import EvalOptions

    ahead = 2 if back_to_back and device.startswith("cuda") else 1
    return EvalOptions(device=device, trials=config.trials, timing=True, sandbox=config.sandbox,
                       precision=config.precision, spares=ahead)


def resumable_run(problem: Path, config: AgentConfig) -> str:
    """The id of the interrupted run `--resume` would continue, else NothingToResume. It only reads:
    no workspace is created and no evaluator started, so `--resume` with nothing to resume leaves
    nothing behind (optimize() checks again once the workspace is open)."""
    from agent.workspace.repo import UnknownProblem

    try:
        with Workspace(config.workspace).open_existing(problem) as repo:
            pointer = read_json(pointer_path(repo))
    except UnknownProblem:
        pointer = None
    return _run_to_resume(problem, pointer)


def _run_to_resume(problem: Path, pointer: dict[str, Any] | None) -> str:
    if not pointer or pointer.get("finished"):
        what = "the last run finished" if pointer else "no run was started"
        raise NothingToResume(f"nothing to resume for {problem}: {what} (run without --resume to start one)")
    return pointer["run_id"]
