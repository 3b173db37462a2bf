"""The state machine, wired as the design's diagram draws it. A step asks and judges `width`
candidates at once, one per lineage (agent/loop/beam.py); width 1 is the single line of attempts.

    draft ═══► candidate ═══► select ──► decide ──► refine ═══► candidate ...
       fan-out    ║   fan-in    │          │ finish
                  ║             │ untimed  ▼
                  ║             └──► stop_untimed ──► END
                  ║
                  ╚═ each lineage: ask ──► compile ──► test ──► profile ──► report
                                              │ build    │ wrong             ▲
                                              │ failed   │ result            │
                                              └──────────┴───────────────────┘

draft poses the task to each lineage; each runs the candidate subgraph in a branch of its own (a
build failure or a wrong result goes straight to report; with config `ahead`, report also sends the
lineage's next request, agent/loop/ahead.py); select merges the branches and ranks the
lineages; decide (budget left) sends the best through refine, which answers each with its outcome
and fans the next step out. Decide, not the model, ends the run; where nothing is timed (a CPU:
Triton's interpreter), nothing could tell a faster kernel from a correct one, so the first correct
kernel ends it (stop_untimed; config `stop_untimed`). The nodes are in agent.loop.nodes.
"""
from __future__ import annotations

from typing import Annotated, Any, TypedDict

from langgraph.graph import END, START, StateGraph

from agent.loop import nodes
from agent.loop.beam import CANDIDATE, fan_out
from agent.loop.session import Session
from agent.loop.state import AgentState, Branch, gather


class Report(TypedDict):
    """What a candidate subgraph hands back to the run: its report, into the fan-in's `branches`
    (nothing else: the run's keys are select's to merge)."""

    branches: Annotated[list[dict[str, Any]], gather]


def build_candidate() -> StateGraph[Branch, Session, Branch, Report]:
    """One lineage's step: ask, then build, test and time its proposal, then report."""
    graph = StateGraph(Branch, context_schema=Session, output_schema=Report)
    graph.add_node("ask", nodes.ask)
    graph.add_node("compile", nodes.compile)
    graph.add_node("test", nodes.test)
    graph.add_node("profile", nodes.profile)
    graph.add_node("report", nodes.report)

    graph.add_edge(START, "ask")
    graph.add_edge("ask", "compile")
    graph.add_conditional_edges("compile", nodes.after_compile, {"built": "test", "failed": "report"})
    graph.add_conditional_edges("test", nodes.after_test, {"correct": "profile", "wrong": "report"})
    graph.add_edge("profile", "report")
    graph.add_edge("report", END)
    return graph


def build_graph() -> StateGraph[AgentState, Session, AgentState, AgentState]:
    graph = StateGraph(AgentState, context_schema=Session)
    graph.add_node("draft", nodes.draft)
    graph.add_node(CANDIDATE, build_candidate().compile())
    graph.add_node("select", nodes.select)
    graph.add_node("decide", nodes.decide)
    graph.add_node("refine", nodes.refine)
    graph.add_node("stop_untimed", nodes.stop_untimed)

    graph.add_edge(START, "draft")
    graph.add_conditional_edges("draft", fan_out, [CANDIDATE])
    graph.add_edge(CANDIDATE, "select")
    graph.add_conditional_edges("select", nodes.after_select, {"decide": "decide", "untimed": "stop_untimed"})
    graph.add_edge("stop_untimed", END)
    graph.add_conditional_edges("decide", nodes.after_decide, {"refine": "refine", "finish": END})
    graph.add_conditional_edges("refine", fan_out, [CANDIDATE])
    return graph


def steps_needed(max_attempts: int) -> int:
    """LangGraph's recursion limit for a run: at most 4 steps per attempt (refine, candidate,
    select, decide), plus slack; the candidate subgraph's 5 nodes are counted in its own."""
    return 6 * max_attempts + 10


def compile_graph(checkpointer=None):
    return build_graph().compile(checkpointer=checkpointer)
