"""Two levels of reductions: row reductions, then a reduction over all of the row results (the
cosine similarity loss: row norms and a row dot product, then a mean over the rows; the triplet
margin loss: row distances, then a mean). Plan kind `twolevel`; `full_shape` and `red_dims` are
the row level's.

Two kernel launches, deterministic, no atomics:

1. the row kernel (the rowwise template's structure: BLOCK_M rows per program, the row in one
   tile or looped over BLOCK_R chunks) computes each row's value that the global reduction reads,
   reduces its block of rows to one partial per global reduction and stores it in a workspace;
2. one program combines the partials in a fixed order and applies the scalar epilogue (the mean's
   scale, 1 - ...), writing a 0-d tensor.
"""
from __future__ import annotations

import math
from typing import Any

from agent.builtin.emitter import Emitter
from agent.builtin.fused import reduction_deps
from agent.builtin.indexing import Group
from agent.builtin.ir import Leaf, Node, Plan, Problem, Unrecognized
from agent.builtin.registry import Family, register
from agent.builtin.rowwise import row_configs, row_tile
from agent.builtin.templates import Context, common_variables, render, store_value

NEUTRAL = {"sum": "0.0", "max": '-float("inf")', "min": 'float("inf")'}
BLOCK_S = 1024  # partials combined at a time by the last program


def _shape(nodes: list[Node], leaves: list[Leaf], ref: Any) -> tuple[int, ...]:
    if not isinstance(ref, tuple):
        return ()
    return leaves[ref[1]].shape if ref[0] == "leaf" else nodes[ref[1]].shape


def _largest(nodes: list[Node], leaves: list[Leaf], ref: Any, stop: set[int]) -> int:
    """The most elements of any value `ref` is computed from, not looking past the nodes in `stop`."""
    if not isinstance(ref, tuple):
        return 1
    size = math.prod(_shape(nodes, leaves, ref))
    if ref[0] == "leaf" or ref[1] in stop:
        return size
    return max([size] + [_largest(nodes, leaves, a, stop) for a in nodes[ref[1]].args])


def stages(nodes: list[Node], leaves: list[Leaf], reductions: list[int]) -> tuple[list[int], list[int]] | None:
    """(row reductions, global reductions) when the reductions come in those two levels, else None."""
    keys = {}
    for i in reductions:
        keys.setdefault((_shape(nodes, leaves, nodes[i].args[0]), tuple(nodes[i].attrs["dims"])), []).append(i)
    if len(keys) != 2:
        return None
    (k1, first), (k2, second) = sorted(keys.items(), key=lambda kv: -math.prod(kv[0][0]))
    return (first, second) if math.prod(k1[0]) > math.prod(k2[0]) else None


def classify_two_level(nodes: list[Node], leaves: list[Leaf], reductions: list[int], out: int
                       ) -> tuple[tuple[int, ...], tuple[int, ...], str] | None:
    """(the row level's full shape, its reduced dims, the plan's summary), or None when the
    reductions are not two levels (the caller says why); Unrecognized for two levels it cannot draft."""
    found = stages(nodes, leaves, reductions)
    if found is None:
        return None
    first, second = found
    full = _shape(nodes, leaves, nodes[first[0]].args[0])
    dims = tuple(nodes[first[0]].attrs["dims"])
    rows = math.prod(full[:dims[0]])
    if dims[-1] != len(full) - 1 or list(dims) != list(range(dims[0], len(full))):
        raise Unrecognized(f"row reductions over dims {list(dims)} of {list(full)} (not the trailing dims) "
                           "followed by a global reduction")
    memo: dict[Any, frozenset[int]] = {}
    for i in second:
        mid = nodes[i].args[0]
        shape = _shape(nodes, leaves, mid)
        if math.prod(shape) != rows or len(nodes[i].attrs["dims"]) != len(shape):
            raise Unrecognized(f"a reduction over {list(nodes[i].attrs['dims'])} of {list(shape)} after row "
                               f"reductions of {list(full)}")
        if reduction_deps(nodes, mid, memo) & set(second):
            raise Unrecognized("a global reduction that depends on another")
        if _largest(nodes, leaves, mid, set(first)) > rows:
            raise Unrecognized("a global reduction of row results that also reads the full rows")
    if math.prod(nodes[out].shape) != 1 or _largest(nodes, leaves, ("node", out), set(second)) > 1:
        raise Unrecognized("a global reduction of row results feeding more than a scalar")
    patterns = sorted({n.attrs.get("pattern") for n in nodes if n.attrs.get("pattern")})
    summary = (f"{'/'.join(patterns) or 'reduction'} over the rows of {'x'.join(map(str, full))}, "
               f"then over all {rows} row results")
    return tuple(full), dims, summary


def render_two_level(plan: Plan, problem: Problem, config: dict[str, Any], ctx: Context) -> str:
    full = tuple(plan.full_shape)
    d0 = plan.red_dims[0]
    rows, width = math.prod(full[:d0]), math.prod(full[d0:])
    looped = bool(config["looped"])
    found = stages(plan.nodes, plan.leaves, [i for i, n in enumerate(plan.nodes) if n.op == "reduce"])
    if found is None:
        raise Unrecognized("a two-level plan whose reductions are not two levels")
    _, second = found
    spaces, loop = row_tile(rows, width)
    em = Emitter(plan, spaces, reduce_group=1, looped=looped, loop=loop)
    stores, combined = [], []
    for slot, i in enumerate(second):
        node = plan.nodes[i]
        mid = node.args[0]
        value, present = em.gen(mid, "row", em.shape(mid))
        value = store_value(value, present, 1, "[BLOCK_M, 1]")
        neutral = NEUTRAL[node.name]
        block = em.fresh("part")
        em.outer.append(f"{block} = tl.where(rmask[:, None], {value}, {neutral})")
        stores.append((slot, f"tl.{node.name}(tl.{node.name}({block}, axis=1), axis=0)"))
        combined.append({"kind": node.name, "slot": slot, "names": [f"red{i}"], "neutral": neutral})
    one = Group(1, "rows", "rmask", "[:, None]")  # the last program: the global results, one "row"
    last = Emitter(plan, {"row": [one], "full": [one, Group(1, "cols", None, "[None, :]")]}, reduce_group=1,
                   looped=False, loop=loop)
    for i in second:
        last.row_memo[("reduced", i)] = (f"red{i}", frozenset())
    out = plan.nodes[plan.out]
    value, present = last.gen(("node", plan.out), "row", tuple(out.shape))
    last.outer.append(f"tl.store(out_ptr + rows[:, None], {store_value(value, present, 1, '[BLOCK_M, 1]')}"
                      f".to(out_ptr.dtype.element_ty), mask=rmask[:, None])")
    return render("twolevel.py.j2", body=em.outer, stores=stores, combined=combined, finish=last.outer,
                  looped=looped, rows=rows, width=width, slots=len(second), block_s=BLOCK_S,
                  **common_variables(plan, problem, config, ctx))


def twolevel_space(plan: Plan) -> list[dict[str, Any]]:
    """Row reductions, then a global one: the row kernel's configurations (agent.builtin.twolevel)."""
    full = plan.full_shape
    d0 = plan.red_dims[0]
    return row_configs(math.prod(full[:d0]), math.prod(full[d0:]))


FAMILY = register(Family(kind="twolevel", render=render_two_level, space=twolevel_space))
