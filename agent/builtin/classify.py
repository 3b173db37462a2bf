"""Which template: keep the nodes the output depends on, renumber them and their leaves, and pick
the plan:

- `pointwise`: only elementwise nodes;
- `rowwise`: elementwise nodes and reductions, all over the same trailing dims of one shape
  (softmax, log-softmax, layer/RMS norm, row reductions with elementwise epilogues);
- `colwise`: the same over a block of middle dims (sum over dim 1 of [B, R, N], softmax over channels);
- `matmul`: one matrix product, its operands leaves, followed by an elementwise epilogue;
- `gemv`, `mm_reduce`: the same with one side of at most a few rows or columns, or followed by
  reductions over the product's last dim (agent.builtin.products).
- `twolevel`: row reductions, then a reduction over all the row results (agent.builtin.twolevel).
- `conv`, `pool`, `scan`, `argreduce`: the families that claim an op (agent.builtin.registry), asked
  first; they take their own output dtypes (an arg-reduction writes int64).
"""
from __future__ import annotations

from agent.builtin.builder import Builder, Unusable
from agent.builtin.ir import FLOAT_DTYPES, Node, Plan, Unrecognized
from agent.builtin.products import mm_reduce_plan, product_kind
from agent.builtin.rewrite import hoist_row_constants
from agent.builtin.twolevel import classify_two_level
from agent.builtin.registry import classify_claimed
from agent.builtin.window import STRAY


def classify(b: Builder, out: int, out_glue, out_shape, out_dtype) -> Plan:
    out = hoist_row_constants(b, out)  # sum(x / |x| * y) = sum(x * y) / |x|: fewer dependent reductions
    # keep only the nodes the output depends on
    live: set[int] = set()
    stack = [out]
    while stack:
        i = stack.pop()
        if i in live:
            continue
        live.add(i)
        for a in b.nodes[i].args:
            if isinstance(a, Unusable):
                raise Unrecognized(f"the forward uses {a.what}")
            if isinstance(a, tuple) and a[0] == "node":
                stack.append(a[1])
    remap = {old: new for new, old in enumerate(sorted(live))}
    nodes = []
    for old in sorted(live):
        node = b.nodes[old]
        node.args = [("node", remap[a[1]]) if isinstance(a, tuple) and a[0] == "node" else a for a in node.args]
        nodes.append(node)
    used_leaves = sorted({a[1] for n in nodes for a in n.args if isinstance(a, tuple) and a[0] == "leaf"})
    leaves, lmap = [], {}
    for old in used_leaves:  # an input read twice (a norm and a division by it) is one leaf: one load
        same = next((k for k, leaf in enumerate(leaves) if leaf == b.leaves[old]), None)
        if same is None:
            leaves.append(b.leaves[old])
            same = len(leaves) - 1
        lmap[old] = same
    for node in nodes:
        node.args = [("leaf", lmap[a[1]]) if isinstance(a, tuple) and a[0] == "leaf" else a for a in node.args]
    out = remap[out]
    claimed = classify_claimed(leaves, nodes, out, out_glue, out_shape, out_dtype)  # conv, pool, scan, argreduce
    if claimed is not None:
        return claimed
    stray = next((what for op, what in STRAY.items() if any(n.op == op for n in nodes)), None)
    if stray is not None:
        raise Unrecognized(stray)
    if nodes[out].dtype not in FLOAT_DTYPES or nodes[out].dtype == "torch.float64":
        raise Unrecognized(f"the output is {nodes[out].dtype}")
    if not any(n.op != "ew" or n.name not in ("view",) for n in nodes):
        raise Unrecognized("forward computes nothing")

    mms = [i for i, n in enumerate(nodes) if n.op == "mm"]
    reductions = [i for i, n in enumerate(nodes) if n.op == "reduce"]
    common = dict(leaves=leaves, nodes=nodes, out=out, out_glue=out_glue, out_shape=out_shape, out_dtype=out_dtype)
    if mms:
        if len(mms) > 1:
            raise Unrecognized(f"{len(mms)} matrix products in one forward")
        mm = nodes[mms[0]]
        if any(not (isinstance(a, tuple) and a[0] == "leaf") for a in mm.args):
            raise Unrecognized("a matrix product of computed operands (a prologue)")
        downstream = _downstream(nodes, mms[0])
        upstream = [i for i in range(len(nodes)) if i not in downstream and i != mms[0]]
        if upstream:
            raise Unrecognized("elementwise work before the matrix product")
        if len(mm.shape) not in (2, 3):
            raise Unrecognized(f"a {len(mm.shape)}-d matrix product")
        if reductions:  # the reductions fused after the product (agent.builtin.products)
            return mm_reduce_plan(nodes, mms[0], reductions, common)
        pattern = mm.attrs.get("pattern", "matmul")
        epi = sorted({n.name for i, n in enumerate(nodes) if i in downstream and n.name != "view"})
        return product_kind(Plan(kind="matmul", summary=f"{pattern} {'x'.join(map(str, mm.shape))}"
                                 + (f" + epilogue ({', '.join(epi)})" if epi else ""), **common))
    if reductions:
        staged = classify_two_level(nodes, leaves, reductions, out)  # row reductions, then a global one
        if staged is not None:
            full, dims, summary = staged
            return Plan(kind="twolevel", full_shape=full, red_dims=dims, summary=summary, **common)
        full = None
        dims = None
        for i in reductions:
            node = nodes[i]
            x = node.args[0]
            shape = leaves[x[1]].shape if x[0] == "leaf" else nodes[x[1]].shape
            if full is None:
                full, dims = shape, node.attrs["dims"]
            elif shape != full or node.attrs["dims"] != dims:
                raise Unrecognized("reductions over different shapes or dimensions")
        if list(dims) != list(range(dims[0], dims[-1] + 1)):
            raise Unrecognized(f"a reduction over non-adjacent dims {list(dims)}")
        patterns = sorted({n.attrs.get("pattern") for n in nodes if n.attrs.get("pattern")})
        where = "last dim" if dims[-1] == len(full) - 1 and len(dims) == 1 else f"dims {list(dims)}"
        if dims[-1] == len(full) - 1:
            return Plan(kind="rowwise", full_shape=tuple(full), red_dims=tuple(dims),
                        summary=f"{'/'.join(patterns)} over the {where} of {'x'.join(map(str, full))}", **common)
        return Plan(kind="colwise", full_shape=tuple(full), red_dims=tuple(dims),
                    summary=f"{'/'.join(patterns)} over {where} of {'x'.join(map(str, full))}", **common)
    names = sorted({n.name for n in nodes if n.name != "view"})
    return Plan(kind="pointwise", summary=f"elementwise ({', '.join(names)}) on {'x'.join(map(str, out_shape))}",
                **common)


def _downstream(nodes: list[Node], start: int) -> set[int]:
    found = {start}
    for i in range(start + 1, len(nodes)):
        if any(isinstance(a, tuple) and a[0] == "node" and a[1] in found for a in nodes[i].args):
            found.add(i)
    found.discard(start)
    return found
