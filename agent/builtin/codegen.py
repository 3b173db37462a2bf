"""Drafting: from a recognized plan (agent.builtin.recognize) and a kernel configuration
(agent.builtin.search) to a candidate module. Each kind's rendering is its family's
(agent.builtin.registry: the index spaces of its tile and the statements agent.builtin.emitter
generates for them, filled into its Jinja template in kernels/); `draft` hands it to
agent.builtin.general, which makes the module general over what a user varies.
"""
from __future__ import annotations

from typing import Any

from agent.builtin.ir import Plan, Problem
from agent.builtin.registry import render_plan


def draft(plan: Plan, problem: Problem, config: dict[str, Any]) -> str:
    """The candidate module for a plan and a configuration."""
    from agent.builtin.general import draft_general

    return draft_general(plan, problem, config, render_plan)  # each kind's rendering: its family's
