"""The templates' shared side: the Jinja environment over kernels/, the torch glue (views,
transposes, casts) replayed in ModelNew's forward, and the variables every template takes from
module.py.j2 (the ModelNew around the kernel: constructor, leaves, output, configuration)."""
from __future__ import annotations

import math
from functools import lru_cache
from pathlib import Path
from typing import Any

import jinja2

from agent.builtin.imports import hoist_imports
from agent.builtin.ir import Plan, Problem, Unrecognized

KERNELS_DIR = Path(__file__).parent / "kernels"
INT32_LIMIT = 2**31 - 1


@lru_cache(maxsize=1)
def _environment() -> jinja2.Environment:
    return jinja2.Environment(loader=jinja2.FileSystemLoader(str(KERNELS_DIR)), undefined=jinja2.StrictUndefined,
                              trim_blocks=True, lstrip_blocks=True, keep_trailing_newline=True, autoescape=False)


def render(template: str, **variables: Any) -> str:
    """A candidate module from a template: the template's imports and the reference's prelude's
    imports written once, at the top (agent.builtin.imports)."""
    return hoist_imports(_environment().get_template(template).render(template_name=f"kernels/{template}", **variables))


def glue_expr(var: str, glue: list[tuple[str, list[Any]]]) -> str:
    expr = var
    for op, args in glue:
        if op in ("view", "_unsafe_view", "reshape"):
            expr += f".reshape({tuple(int(s) for s in args[0])})"
        elif op == "t":
            expr += ".t()"
        elif op == "transpose":
            expr += f".transpose({int(args[0])}, {int(args[1])})"
        elif op == "permute":
            expr += f".permute({tuple(int(s) for s in args[0])})"
        elif op == "expand":
            expr += f".expand({tuple(int(s) for s in args[0])})"
        elif op == "unsqueeze":
            expr += f".unsqueeze({int(args[0])})"
        elif op == "squeeze":
            if not args:
                expr += ".squeeze()"
            elif isinstance(args[0], list):
                expr += f".squeeze({tuple(int(s) for s in args[0])})"
            else:
                expr += f".squeeze({int(args[0])})"
        elif op in ("clone", "contiguous", "lift_fresh_copy"):
            expr += ".contiguous()"
        elif op == "_to_copy":
            expr += f".to({args[0]})"
        elif op in ("alias", "detach"):
            pass
        else:
            raise Unrecognized(f"glue op {op}")
    return expr


def leaf_sources(plan: Plan, problem: Problem) -> list[str]:
    out = []
    for leaf in plan.leaves:
        base = problem.input_names[leaf.ref] if leaf.kind == "input" else problem.param_exprs[leaf.ref]
        out.append(glue_expr(base, leaf.glue))
    return out


def needs_int64(plan: Plan) -> bool:
    """Whether offsets may pass int32 (then the kernels index in int64)."""
    sizes = [math.prod(l.shape) for l in plan.leaves] + [math.prod(plan.out_shape)]
    spans = [sum((s - 1) * abs(t) for s, t in zip(l.shape, l.strides)) for l in plan.leaves]
    return max(sizes + spans) > INT32_LIMIT - 65536


def common_variables(plan: Plan, problem: Problem, config: dict[str, Any]) -> dict[str, Any]:
    out_node = plan.nodes[plan.out]
    return dict(
        problem_name=problem.path.name, summary=plan.summary, prelude=problem.prelude,
        init_source=problem.init_source.rstrip("\n"), forward_params=problem.forward_params,
        leaves=[{"ptr": f"in{i}_ptr", "var": f"in{i}", "source": src} for i, src in enumerate(leaf_sources(plan, problem))],
        out_alloc=tuple(out_node.shape), out_dtype=plan.out_dtype,
        out_glue=glue_expr("out", plan.out_glue) if plan.out_glue else "out",
        config=config, config_text=", ".join(f"{k}={v}" for k, v in config.items()), i64=needs_int64(plan),
    )


def store_value(value: str, present: frozenset[int], everything: int, tile: str) -> str:
    return value if len(present) == everything else f"tl.broadcast_to({value}, {tile})"
