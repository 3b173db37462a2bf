"""Split reductions: a rowwise plan whose rows are too few to fill the GPU one program per row
(LayerNorm over rows of 4M elements, a loss's mean over every element: a single row) splits each
row across programs. Deterministic, with no atomics:

1. one pass per level of reductions (agent.builtin.fused.levels: a variance needs its mean first,
   unless the two fuse as Welford's moments; a softmax's max and sum fuse as online softmax): each
   program reduces its chunk of a row (whole BLOCK_R tiles) and stores its partial results in a
   float32 workspace [slots, rows, n_split]; a later pass combines a level's partials in a fixed
   order (one loop over them, then a tree sum), the same in every program that needs them;
2. a last pass: with a full-size output (normalization) every program combines the partials and
   applies the elementwise epilogue to its chunk; with one value per row (a sum, a loss) one
   program per row combines them and writes the row's result (a 0-d tensor for a loss).

forward computes the split at run time from the sizes, so the kernel is general over them: about
`programs` programs in all (a configuration value, from the device's SM count), chunks of whole
BLOCK_R tiles.
"""
from __future__ import annotations

import math
from typing import Any

from agent.builtin.emitter import Emitter
from agent.builtin.fused import Partial, fused_loop, levels, moments
from agent.builtin.indexing import Group
from agent.builtin.ir import Plan, Problem, Unrecognized
from agent.builtin.templates import Context, common_variables, render, store_value

BLOCK_S = 128  # partials combined at a time
LONG_ROW = 32768  # rows this long are split across programs when they are too few to fill the device
NEUTRAL = {"sum": "0.0", "max": '-float("inf")', "min": 'float("inf")'}
SLOTS = {"sum": 1, "max": 1, "min": 1, "online": 2, "moments": 3}


def row_shape(plan: Plan) -> tuple[int, int]:
    """(rows, width) of a rowwise plan."""
    full, d0 = tuple(plan.full_shape), plan.red_dims[0]
    return math.prod(full[:d0]), math.prod(full[d0:])


def _combined(partial: Partial, slot: int, em: Emitter) -> dict[str, Any]:
    """The template's description of a stored partial to combine, and the names its results get
    (remembered as the reductions' values in `em`)."""
    names = [f"red{i}" for i in partial.nodes]
    if partial.kind == "online":  # nodes (S, M): the template combines M first
        names = [f"red{partial.nodes[1]}", f"red{partial.nodes[0]}"]
    for index in partial.nodes:
        em.row_memo[("reduced", index)] = (f"red{index}", frozenset())
    if partial.kind == "moments":  # the mean itself, not the sum times 1/n
        em.row_memo[("reduced", moments(em.plan, partial.nodes[1])[2])] = (f"red{partial.nodes[0]}_mean", frozenset())
    return {"kind": partial.kind, "slot": slot, "names": names, "neutral": NEUTRAL.get(partial.kind, "0.0")}


def render_split(plan: Plan, problem: Problem, config: dict[str, Any], ctx: Context) -> str:
    rows, width = row_shape(plan)
    out = plan.nodes[plan.out]
    out_full = math.prod(out.shape) == rows * width
    if not out_full and math.prod(out.shape) != rows:
        raise Unrecognized(f"an output of {math.prod(out.shape)} elements from rows of {rows} x {width}")
    spaces = {"full": [Group(rows, "rows", "rmask", "[:, None]"), Group(width, "cols", "cmask", "[None, :]")],
              "row": [Group(rows, "rows", "rmask", "[:, None]")]}
    loop = {"tile": "[BLOCK_M, BLOCK_R]", "mask": "mask", "header": "for r0 in range(start, end, BLOCK_R):",
            "start": "start", "step": "BLOCK_R",
            "setup": ["cols = r0 + tl.arange(0, BLOCK_R)", f"cmask = cols < {width}",
                      "mask = rmask[:, None] & cmask[None, :]"]}

    def emitter() -> Emitter:
        return Emitter(plan, spaces, reduce_group=1, looped=True, loop=loop)

    stored: list[tuple[Partial, int]] = []  # each level's partials and their first workspace slot
    slot = 0
    passes = []
    for indices in levels(emitter()):
        em = emitter()
        combined = [_combined(p, s, em) for p, s in stored]
        partials = fused_loop(em, indices, 1, "[:, None]", frozenset({0, 1}))
        stores = []
        for p in partials:
            stores += [(slot + j, name) for j, name in enumerate(p.values)]
            stored.append((p, slot))
            slot += SLOTS[p.kind]
        passes.append({"combined": combined, "body": em.outer, "stores": stores})
    em = emitter()
    combined = [_combined(p, s, em) for p, s in stored]
    final: list[str] = []
    if out_full:  # the epilogue, element by element in the chunk's loop
        em.body = []
        value, present = em.gen(("node", plan.out), "full", tuple(out.shape))
        final = em.body + [f"tl.store(out_ptr + rows[:, None] * {width} + cols[None, :], "
                           f"{store_value(value, present, 2, '[BLOCK_M, BLOCK_R]')}.to(out_ptr.dtype.element_ty), "
                           f"mask=mask)"]
    else:
        value, present = em.gen(("node", plan.out), "row", tuple(out.shape))
        em.outer.append(f"tl.store(out_ptr + rows[:, None], {store_value(value, present, 1, '[BLOCK_M, 1]')}"
                        f".to(out_ptr.dtype.element_ty), mask=rmask[:, None])")
    return render("split.py.j2", levels=passes, combined=combined, body=em.outer, final=final, out_full=out_full,
                  rows=rows, width=width, slots=max(slot, 1), block_s=BLOCK_S,
                  **common_variables(plan, problem, config, ctx))


# --- the search space -------------------------------------------------------------------------------

def split_first(rows: int, width: int, sms: int) -> bool:
    """Whether a split configuration comes first: rows too few to fill the device one per program
    (a loss's single row included), each long enough to share."""
    return width >= LONG_ROW and rows < 2 * sms


def split_space(rows: int, width: int, sms: int) -> list[dict[str, Any]]:
    """Split configurations for rows of `width` (none when one program per row fills the device):
    the tile, its warps, and about how many programs share the rows (from the SM count)."""
    if width < LONG_ROW or rows >= 4 * sms:
        return []
    cap = max(1024, 1 << math.ceil(math.log2(width)))
    order = [(4096, 8, 4), (2048, 8, 4), (4096, 8, 8), (8192, 16, 4), (4096, 8, 2), (1024, 4, 4), (2048, 4, 8),
             (4096, 16, 4)]
    out, seen = [], set()
    for block, warps, waves in order:
        block = min(block, cap)
        config = {"split": True, "BLOCK_R": block, "programs": waves * sms, "num_warps": min(warps, block // 128)}
        if repr(config) not in seen:
            seen.add(repr(config))
            out.append(config)
    return out
