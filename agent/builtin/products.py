"""The plan kinds of a matrix product besides the tiled `matmul`:

- `gemv`: a 2-D product with at most GEMV_MAX rows or columns (a matrix-vector product, nn.Linear
  on a batch of one, a vector on the left). Its cost is reading the large operand once, so the
  kernel streams it (agent.builtin.gemv) instead of tiling the tiny side up to a tensor-core tile;
- `mm_reduce`: a 2-D product followed by reductions over its last dim (the features of a Linear):
  sum, mean, max, min, logsumexp, softmax, norms; elementwise work before and after them
  (agent.builtin.mm_reduce).

Reductions over dims of size 1 (a sum over the kept dim of an earlier reduction) are identities
and become views first.
"""
from __future__ import annotations

import math
from typing import Any

from agent.builtin.ir import Node, Plan, Unrecognized

GEMV_MAX = 8  # at most this many rows (or columns): the product is streamed as matrix-vector products


def gemv_sides(plan: Plan) -> tuple[str, int, int, int]:
    """(orientation, R, J, K) of a gemv plan: `rows` when the product has few columns (out[r, j] =
    A[r, :] . B[:, j], R = M), `cols` when it has few rows (R = N, the matrix is B read transposed)."""
    mm = next(n for n in plan.nodes if n.op == "mm")
    m, n = mm.shape
    k = plan.leaves[mm.args[0][1]].shape[1]
    return ("rows", m, n, k) if n <= m else ("cols", n, m, k)


def product_kind(plan: Plan) -> Plan:
    """A matmul plan as a gemv plan when one side of its 2-D product is tiny."""
    mm = next(n for n in plan.nodes if n.op == "mm")
    if mm.name != "mm" or min(mm.shape) > GEMV_MAX:
        return plan
    orientation, r, j, k = gemv_sides(plan)
    plan.kind = "gemv"
    plan.summary += f" (K={k}: streams the {r} x {k} side once, {j} vector{'s' if j > 1 else ''})"
    return plan


def mm_reduce_plan(nodes: list[Node], mm_index: int, reductions: list[int], common: dict[str, Any]) -> Plan:
    """The plan of a 2-D product followed by reductions over its last dim, or why not."""
    mm = nodes[mm_index]
    shape = {("node", i): n.shape for i, n in enumerate(nodes)}
    for leaf_index, leaf in enumerate(common["leaves"]):
        shape[("leaf", leaf_index)] = leaf.shape
    real = []
    for i in reductions:
        node = nodes[i]
        full = shape[node.args[0]] if isinstance(node.args[0], tuple) else ()
        if full and all(full[d] == 1 for d in node.attrs["dims"]):  # over size-1 dims: the value itself
            nodes[i] = Node("ew", "view", [node.args[0]], node.shape, node.dtype)
        else:
            real.append(i)
    if mm.name != "mm":
        raise Unrecognized("a batched matrix product followed by a reduction")
    if not real:
        raise Unrecognized("a matrix product followed by reductions over size-1 dims only")
    for i in real:
        node = nodes[i]
        full = shape[node.args[0]]
        if full != mm.shape or tuple(node.attrs["dims"]) != (1,):
            raise Unrecognized(f"a reduction over dims {list(node.attrs['dims'])} of a {list(full)} value after a "
                               f"{'x'.join(map(str, mm.shape))} matrix product (only the product's last dim is fused)")
    names = sorted({p if (p := nodes[i].attrs.get("pattern")) not in (None, "reduction") else nodes[i].name
                    for i in real})
    out = nodes[common["out"]]
    kept = "full rows" if math.prod(out.shape) == math.prod(mm.shape) else "one value per row"
    pattern = mm.attrs.get("pattern", "matmul")
    return Plan(kind="mm_reduce", full_shape=tuple(mm.shape), red_dims=(1,),
                summary=f"{pattern} {'x'.join(map(str, mm.shape))} then {'/'.join(names)} over its last dim ({kept})",
                **common)
