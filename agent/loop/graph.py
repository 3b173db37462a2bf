"""The state machine, wired as the design's diagram draws it:

    draft ──► compile ──► test ──► profile ──► decide ──► refine ─┐
                 │          │         │          ▲  │        ▲    │
                 │ build    │ wrong   │          │  │ finish └────┘ (back to compile)
                 │ failed   │ result  │ untimed  │  ▼
                 └──────────┴─────────┼──────────┘ END
                                      ▼             ▲
                                 stop_untimed ──────┘

A build failure or a wrong result short-circuits to decide, which (budget left) sends it back
to the model through refine with the evaluator's message; a correct kernel is profiled first.
Decide, not the model, ends the run; where nothing is timed (a CPU: Triton's interpreter),
nothing could tell a faster kernel from a correct one, so the first correct kernel ends it
(stop_untimed; config `stop_untimed`). The nodes are in agent.loop.nodes.
"""
from __future__ import annotations

from langgraph.graph import END, START, StateGraph

from agent.loop import nodes
from agent.loop.session import Session
from agent.loop.state import AgentState


def build_graph() -> StateGraph[AgentState, Session, AgentState, AgentState]:
    graph = StateGraph(AgentState, context_schema=Session)
    graph.add_node("draft", nodes.draft)
    graph.add_node("compile", nodes.compile)
    graph.add_node("test", nodes.test)
    graph.add_node("profile", nodes.profile)
    graph.add_node("decide", nodes.decide)
    graph.add_node("refine", nodes.refine)
    graph.add_node("stop_untimed", nodes.stop_untimed)

    graph.add_edge(START, "draft")
    graph.add_edge("draft", "compile")
    graph.add_conditional_edges("compile", nodes.after_compile, {"built": "test", "failed": "decide"})
    graph.add_conditional_edges("test", nodes.after_test, {"correct": "profile", "wrong": "decide"})
    graph.add_conditional_edges("profile", nodes.after_profile, {"decide": "decide", "untimed": "stop_untimed"})
    graph.add_edge("stop_untimed", END)
    graph.add_conditional_edges("decide", nodes.after_decide, {"refine": "refine", "finish": END})
    graph.add_edge("refine", "compile")
    return graph


def steps_needed(max_attempts: int) -> int:
    """LangGraph's recursion limit for a run: at most 5 steps per attempt, plus slack."""
    return 6 * max_attempts + 10


def compile_graph(checkpointer=None):
    return build_graph().compile(checkpointer=checkpointer)
