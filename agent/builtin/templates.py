"""The templates' shared side: the Jinja environment over kernels/, the torch glue (views,
transposes, casts) replayed in ModelNew's forward, and the variables every template takes from
module.py.j2 (the ModelNew around the kernel: constructor, leaves, output, configuration)."""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any

import jinja2

from agent.builtin.imports import hoist_imports
from agent.builtin.ir import Plan, Problem, Unrecognized

KERNELS_DIR = Path(__file__).parent / "kernels"
INT32_LIMIT = 2**31 - 1
INT64_MAX = 2**63 - 1
OFFSET_LIMIT = INT32_LIMIT - 65536  # elements a kernel indexing in int32 may address
ONE_TILE_MAX = 16384  # the widest row (elements) one program holds as a single tile in registers


@dataclass
class Context:
    """What one rendering of a plan takes besides the plan (agent.builtin.general renders the
    problem's plan and the plans traced at other sizes with the same context)."""

    guards: list[str] = field(default_factory=list)  # forward's first lines: sizes read, inputs checked
    i64: bool | None = None  # index in int64 (None: as the plan's sizes need)
    general: bool = False  # some sizes are read at run time (forward then bounds int32 offsets)
    strict: bool = True  # decline shapes that would be slow (only for the problem's own plan)
    notes: list[str] = field(default_factory=list)  # ModelNew's docstring: what may vary
    sizes: list[tuple[str, str]] = field(default_factory=list)  # kernel size parameters: (name, forward's expression)
    # the plan at the problem's own sizes, for what a template tunes there whatever sizes it renders
    # (attention's shared-memory budget): None when that is the plan being rendered
    origin: Plan | None = None


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
        elif op == "repeat":
            expr += f".repeat({tuple(int(s) for s in args[0])})"
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
        elif op == "select":
            expr += f".select({int(args[0])}, {int(args[1])})"
        elif op == "slice":
            expr += _slice_expr(args)
        elif op in ("alias", "detach"):
            pass
        else:
            raise Unrecognized(f"glue op {op}")
    return expr


def _slice_expr(args: list[Any]) -> str:
    """aten.slice(dim, start, end, step) as Python indexing, with the traced bounds as written (a
    negative end stays relative to the size)."""
    dim = int(args[0]) if args else 0
    start = args[1] if len(args) > 1 and args[1] is not None else None
    end = args[2] if len(args) > 2 and args[2] is not None and args[2] < INT64_MAX else None
    step = args[3] if len(args) > 3 and args[3] not in (None, 1) else None
    piece = f"{'' if not start else int(start)}:{'' if end is None else int(end)}"
    piece += f":{int(step)}" if step is not None else ""
    lead = ["..."] + [":"] * (-dim - 1) if dim < 0 else [":"] * dim
    parts = lead[:1] + [piece] + lead[1:] if dim < 0 else lead + [piece]
    return f"[{', '.join(parts)}]"


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
    return max(sizes + spans) > OFFSET_LIMIT


def local_name(base: str, problem: Problem) -> str:
    """A local variable of forward that no input of the same name is shadowed by."""
    name = base
    while name in problem.input_names:
        name += "_"
    return name


def leaf_checks(plan: Plan, problem: Problem) -> list[str]:
    """forward's checks that each parameter operand has the shape the kernel was drafted for."""
    lines = []
    expected = local_name("expected", problem)
    for i, (leaf, source) in enumerate(zip(plan.leaves, leaf_sources(plan, problem))):
        if leaf.kind == "param":
            if leaf.glue:  # the message names no size of the glue (a reshape's): the sizes may be free
                source = f"{problem.param_exprs[leaf.ref]}, as the kernel reads it,"
            lines += [f"{expected} = {tuple(leaf.shape)!r}",
                      f"if tuple(in{i}.shape) != {expected}:",
                      f'    raise ValueError(f"{source} has shape {{tuple(in{i}.shape)}}; this drafted kernel handles '
                      f'{{{expected}}} (other sizes are fixed by the draft)")']
    return lines


def common_variables(plan: Plan, problem: Problem, config: dict[str, Any], ctx: Context) -> dict[str, Any]:
    out_node = plan.nodes[plan.out]
    i64 = needs_int64(plan) if ctx.i64 is None else ctx.i64
    variants = problem.variants
    return dict(
        problem_name=problem.path.name, summary=plan.summary, prelude=problem.prelude,
        init_source=problem.init_source.rstrip("\n"), forward_params=problem.forward_params,
        leaves=[{"ptr": f"in{i}_ptr", "var": f"in{i}", "source": src} for i, src in enumerate(leaf_sources(plan, problem))],
        out_alloc=tuple(out_node.shape), out_dtype=plan.out_dtype,
        out_glue=glue_expr("out", plan.out_glue) if plan.out_glue else "out",
        config=config, config_text=", ".join(f"{k}={v}" for k, v in config.items()), i64=i64,
        scalars=variants.scalars if variants is not None else [], sizes=ctx.sizes, guards=ctx.guards, notes=ctx.notes,
        leaf_checks=leaf_checks(plan, problem), offset_limit=OFFSET_LIMIT if ctx.general and not i64 else None,
        max_tile=ONE_TILE_MAX,
    )


def store_value(value: str, present: frozenset[int], everything: int, tile: str) -> str:
    return value if len(present) == everything else f"tl.broadcast_to({value}, {tile})"
