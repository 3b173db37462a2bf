"""The built-in policy's families, one per kind of plan: how each recognizes, drafts and searches
its kind, in one place (its own module), found here by kind.

A family module ends with `FAMILY = register(Family(kind=..., render=..., space=..., ...))`:

- `render(plan, problem, config, ctx) -> str`: one rendering of the candidate module for a plan
  and a configuration (agent.builtin.general makes it general over what a user varies);
- `space(plan) -> [config, ...]`: its configurations, the shape-based default first
  (agent.builtin.search chooses among them from the feedback);
- `from_graph(traced, problem, why) -> Plan`: a family that drafts what no other does (the
  fallback, agent.builtin.fallback): agent.builtin.lower hands it the traced graph when its own
  walk or the classifier raises Unrecognized (`why`), through `fallback_plan`;
- `match(traced) -> Plan | None`: a family recognized on the traced aten graph itself, before it
  is lowered to the IR (attention, cross-entropy): its plan, None when the graph is not its kind,
  Unrecognized (one line) when it is with something the kernel does not compute;
- `claims` and `classify`: the IR ops whose presence makes a plan of this kind (a convolution, a
  pooling window, a scan, an arg-reduction), and the classifier that makes it from the traced
  nodes; agent.builtin.classify asks the claiming families in `rank` order before its own
  reductions, products and elementwise plans. A kind made elsewhere (the reductions and products
  by agent.builtin.classify, attention and cross-entropy by their `match`) claims nothing.

This module imports no family: each registers itself when imported, and agent.builtin.families
imports them all (the policy imports that). So adding a family touches its own module, its
template and one line of agent.builtin.families, and no module here imports in a circle
(tests/builtin/test_registry.py checks both).
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from agent.builtin.ir import Leaf, Node, Plan, Problem
    from agent.builtin.templates import Context


@dataclass(frozen=True)
class Family:
    kind: str
    render: Callable[["Plan", "Problem", dict[str, Any], "Context"], str]
    space: Callable[["Plan"], list[dict[str, Any]]]
    claims: tuple[str, ...] = ()  # IR ops that make a plan of this kind
    classify: Callable[..., "Plan"] | None = None  # (leaves, nodes, out, out_glue, out_shape, out_dtype) -> Plan
    rank: int = 0  # among claiming families, lower asks first (a convolution before a pooling window)
    from_graph: Callable[[Any, "Problem", Exception], "Plan"] | None = None  # the fallback: what no family claims
    match: Callable[[Any], "Plan | None"] | None = None  # recognized on the traced graph, before lowering


_FAMILIES: dict[str, Family] = {}


def register(family: Family) -> Family:
    """Add a family (its module's import does it); a kind registered twice is a defect."""
    if family.kind in _FAMILIES and _FAMILIES[family.kind] is not family:
        raise ValueError(f"two families of kind {family.kind!r}")
    if family.claims and family.classify is None:
        raise ValueError(f"family {family.kind!r} claims ops {family.claims} but has no classify")
    if family.from_graph is not None and any(f.from_graph is not None and f is not family for f in _FAMILIES.values()):
        raise ValueError(f"two fallback families (the second: {family.kind!r})")
    _FAMILIES[family.kind] = family
    return family


def family(kind: str) -> Family:
    try:
        return _FAMILIES[kind]
    except KeyError:
        known = ", ".join(sorted(_FAMILIES)) or "none (agent.builtin.families not imported)"
        raise KeyError(f"no family of plan kind {kind!r} (registered: {known})") from None


def kinds() -> list[str]:
    return sorted(_FAMILIES)


def render_plan(plan: "Plan", problem: "Problem", config: dict[str, Any], ctx: "Context") -> str:
    """One rendering of the module for a plan (the problem's, or one traced at other sizes)."""
    return family(plan.kind).render(plan, problem, config, ctx)


def space(plan: "Plan") -> list[dict[str, Any]]:
    """The plan's configurations, in their order."""
    return family(plan.kind).space(plan)


def classify_claimed(leaves: list["Leaf"], nodes: list["Node"], out: int, out_glue: Any, out_shape: Any,
                     out_dtype: Any) -> "Plan | None":
    """The plan of the first family (by rank) that claims an op among the live nodes; None when none does."""
    ops = {n.op for n in nodes}
    for fam in sorted((f for f in _FAMILIES.values() if f.claims), key=lambda f: (f.rank, f.kind)):
        if ops & set(fam.claims):
            assert fam.classify is not None
            return fam.classify(leaves, nodes, out, out_glue, out_shape, out_dtype)
    return None


def matched_plan(traced: Any) -> "Plan | None":
    """The plan of the first family (by kind) whose `match` recognizes the traced graph; None when none does."""
    for fam in sorted((f for f in _FAMILIES.values() if f.match is not None), key=lambda f: f.kind):
        assert fam.match is not None
        plan = fam.match(traced)
        if plan is not None:
            return plan
    return None


def fallback_plan(traced: Any, problem: "Problem", why: Exception) -> "Plan | None":
    """The fallback family's plan of a traced forward no family claims (`why`: the reason), or None
    when no fallback is registered."""
    fallback = next((f for f in _FAMILIES.values() if f.from_graph is not None), None)
    return None if fallback is None else fallback.from_graph(traced, problem, why)
