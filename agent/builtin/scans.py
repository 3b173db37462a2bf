"""Scans along one dim: cumsum and cumprod, reverse (flip, scan, flip), exclusive (torch.cat of a
zero slice in front, before the cumsum or after it (of the input less its last entries), as
KernelBench writes it, or cumsum(x) - x), masked (cumsum(x * mask) with a bool mask). Template
kernels/scan.py.j2.

The scan's input is an elementwise prologue P of the leaves (x, x * mask), possibly padded with
zeros along the scanned dim (the exclusive form) and cut to a prefix of its leading dim (`[:-1]`);
its result may be flipped back (reverse), cut to a prefix along the scanned dim, and followed by
an elementwise epilogue. The kernel walks the scanned dim in BLOCK_L-wide tiles: each tile is
scanned with tl.cumsum / tl.cumprod (float32) and offset by the running carry of the tiles before
it (after it, for a reverse scan), so rows of any length take one program and a fixed order:
deterministic. Scanning the last dim, a program takes BLOCK_M rows ([BLOCK_M, BLOCK_L] tiles);
scanning a middle dim, a program takes one outer index and BLOCK_N contiguous inner columns
([BLOCK_L, BLOCK_N] tiles, coalesced loads).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from agent.builtin.emitter import Emitter
from agent.builtin.indexing import Group
from agent.builtin.registry import Family, register
from agent.builtin.ir import FLOAT_DTYPES, Leaf, Node, Plan, Problem, Unrecognized
from agent.builtin.configs import SMS, pow2, unique
from agent.builtin.templates import INT64_MAX, Context, common_variables, store_value
from agent.builtin.templates import render as render_template
from agent.builtin.window import downstream, epilogue_names, upstream, users

CHAIN = ("flip", "pad", "slice")
ALLOWED = {"ew", "scan", "const"} | set(CHAIN)


@dataclass
class Size:
    """A size of the scan's domain: its value, and how forward writes it (from the prologue's own
    sizes, so the draft stays general: `(40 + 1)` for a padded row)."""

    value: int
    expr: str


@dataclass
class Shape:
    """The scan as the kernel sees it."""

    index: int  # the scan node
    end: int  # the node the epilogue reads (the scan, or the end of the chain after it)
    source: Any  # the prologue's ref (P)
    dim: int
    reverse: bool
    before: int  # zeros in front along the dim (an exclusive scan)
    after: int  # zeros behind
    domain: list[Size]  # the output's sizes (the end node's shape)
    source_shape: tuple[int, ...]


def _chain(leaves: list[Leaf], nodes: list[Node], index: int) -> Shape:
    scan = nodes[index]
    d = scan.attrs["dim"]
    pre: list[int] = []
    ref = scan.args[0]
    while isinstance(ref, tuple) and ref[0] == "node" and nodes[ref[1]].op in CHAIN:
        pre.append(ref[1])
        ref = nodes[ref[1]].args[0]
    source = ref
    if isinstance(source, tuple) and source[0] == "node":
        if nodes[source[1]].op != "ew" or any(nodes[i].op != "ew" for i in upstream(nodes, source[1])):
            raise Unrecognized(f"a scan of a {nodes[source[1]].op} result (only elementwise work may come first)")
    post: list[int] = []
    cur = index
    while True:
        following = users(nodes, cur)
        if len(following) == 1 and nodes[following[0]].op in CHAIN:
            post.append(following[0])
            cur = following[0]
        else:
            break
    for i in pre[1:] + post[:-1] + [index] * bool(post):  # inner links of the chain feed only the next one
        if len(users(nodes, i)) != 1:
            raise Unrecognized("a value inside the scan's chain (flip, pad, slice) used twice")
    if pre and len(users(nodes, pre[0])) != 1:
        raise Unrecognized("a value inside the scan's chain (flip, pad, slice) used twice")
    src_shape = nodes[source[1]].shape if source[0] == "node" else leaves[source[1]].shape
    return _normalize(nodes, index, cur, source, src_shape, list(reversed(pre)), post, d)


def _normalize(nodes: list[Node], index: int, end: int, source, src_shape, pre: list[int], post: list[int],
               d: int) -> Shape:
    shape = src_shape
    flips = [0, 0]
    before = after = 0
    rank = len(nodes[index].shape)
    sizes = [Size(s, str(s)) for s in shape]
    for stage, chain in enumerate((pre, post)):
        for i in chain:
            node = nodes[i]
            a = node.attrs
            if node.op == "flip":
                if a["dims"] != (d,):
                    raise Unrecognized(f"a flip along dims {list(a['dims'])} around a scan along dim {d}")
                flips[stage] += 1
            elif node.op == "pad":
                # zeros in front of a cumsum's result are the cumsum of zeros in front of its input (KernelBench
                # L1 92 writes the exclusive scan so: the scan of the input less its last element, a zero put
                # in front): the kernel's form, zeros before the scan
                behind = stage and (a["after"] or nodes[index].name != "sum")
                if a["dim"] != d or behind:
                    raise Unrecognized("zeros concatenated along another dim than the scanned one, or after the scan "
                                       "other than in front of a cumsum")
                before, after = before + a["before"], after + a["after"]
                size = sizes[d]
                sizes[d] = Size(size.value + a["before"] + a["after"],
                                f"({size.expr} + {a['before'] + a['after']})")
            else:
                sizes[a["dim"]] = _sliced(sizes[a["dim"]], a, node.shape[a["dim"]], stage, d)
    if flips == [1, 1]:
        if before or after or any(nodes[i].op == "slice" for i in pre + post):
            raise Unrecognized("a reverse scan with zeros concatenated or a slice")
        reverse = True
    elif flips == [0, 0]:
        reverse = False
    else:
        raise Unrecognized("a flip that does not make a reverse scan (flip, scan, flip)")
    if [s.value for s in sizes] != list(nodes[end].shape) or len(sizes) != rank:
        raise Unrecognized(f"the scan's output {list(nodes[end].shape)} from {list(shape)}")
    return Shape(index=index, end=end, source=source, dim=d, reverse=reverse, before=before, after=after,
                 domain=sizes, source_shape=tuple(shape))


def _sliced(size: Size, a: dict[str, Any], result: int, stage: int, d: int) -> Size:
    """A prefix of a dim (start 0, step 1): of the leading dim anywhere, of the scanned dim after the scan."""
    start, end, step = a["start"] or 0, a["end"], a["step"] or 1
    if start != 0 or step != 1:
        raise Unrecognized("a slice of a scan's input or output that does not start at 0 (or has a step)")
    if a["dim"] == d and not stage:
        raise Unrecognized("a slice along the scanned dim before the scan")
    if a["dim"] != d and a["dim"] != 0:
        raise Unrecognized(f"a slice along dim {a['dim']} around a scan (only the leading dim may be cut)")
    if end is None or end >= INT64_MAX or end >= size.value:
        return size
    if end < 0:
        return Size(result, f"({size.expr} - {-end})")
    return Size(result, str(end))  # a fixed length, whatever the input's


def classify(leaves: list[Leaf], nodes: list[Node], out: int, out_glue, out_shape, out_dtype) -> Plan:
    scans = [i for i, n in enumerate(nodes) if n.op == "scan"]
    if len(scans) > 1:
        raise Unrecognized(f"{len(scans)} scans in one forward")
    other = sorted({n.op for n in nodes} - ALLOWED)
    if other:
        raise Unrecognized(f"a scan together with a {other[0]}")
    index = scans[0]
    shape = _chain(leaves, nodes, index)
    if shape.source[0] == "leaf" and leaves[shape.source[1]].dtype not in FLOAT_DTYPES:
        raise Unrecognized(f"a scan of a {leaves[shape.source[1]].dtype} tensor")
    chain = {shape.index, shape.end} | {i for i, n in enumerate(nodes) if n.op in CHAIN}
    for i, node in enumerate(nodes):  # the epilogue reads the chain's end only
        if i not in chain and any(isinstance(a, tuple) and a[0] == "node" and a[1] in chain - {shape.end}
                                  for a in node.args):
            raise Unrecognized("elementwise work on the scan's result before its flip or slice")
    if out != shape.end and (out not in downstream(nodes, shape.end) or nodes[out].shape != nodes[shape.end].shape):
        raise Unrecognized("an output that is not the scan (or an elementwise function of it)")
    if out_dtype not in FLOAT_DTYPES or out_dtype == "torch.float64":
        raise Unrecognized(f"the output is {out_dtype}")
    scan = nodes[index]
    form = "reverse " if shape.reverse else "exclusive " if shape.before else ""
    what = {"sum": "cumsum", "prod": "cumprod"}[scan.name]
    summary = (f"{form}{what} along dim {shape.dim} of {'x'.join(str(s.value) for s in shape.domain)}"
               + epilogue_names(nodes, downstream(nodes, shape.end)))
    return Plan(kind="scan", leaves=leaves, nodes=nodes, out=out, out_glue=out_glue, out_shape=out_shape,
                out_dtype=out_dtype, full_shape=tuple(s.value for s in shape.domain), red_dims=(shape.dim,),
                summary=summary)


def scan_shape(plan: Plan) -> Shape:
    return _chain(plan.leaves, plan.nodes, next(i for i, n in enumerate(plan.nodes) if n.op == "scan"))


def _product(sizes: list[Size]) -> Size:
    kept = [s for s in sizes if s.value != 1]
    return Size(math.prod(s.value for s in kept), " * ".join(s.expr for s in kept) or "1")


def render(plan: Plan, problem: Problem, config: dict[str, Any], ctx: Context) -> str:
    sh = scan_shape(plan)
    d = sh.dim
    scan = plan.nodes[sh.index]
    outer, length, inner = _product(sh.domain[:d]), sh.domain[d], _product(sh.domain[d + 1:])
    src = sh.source_shape
    padded = bool(sh.before or sh.after)
    rows = inner.value == 1
    if rows:
        col, col_mask = ("src", "smask") if padded else ("cols", "cmask")
        pro_groups = [Group(math.prod(src[:d]), "rows", "rmask", "[:, None]"), Group(src[d], col, col_mask, "[None, :]")]
        epi_groups = [Group(outer.value, "rows", "rmask", "[:, None]"), Group(length.value, "cols", "cmask", "[None, :]")]
        tile = "[BLOCK_M, BLOCK_L]"
    else:
        col, col_mask = ("src", "smask") if padded else ("l_idx", "l_mask")
        pro_groups = [Group(math.prod(src[:d]), "pid_o", None, ""), Group(src[d], col, col_mask, "[:, None]"),
                      Group(inner.value, "n_idx", "n_mask", "[None, :]")]
        epi_groups = [Group(outer.value, "pid_o", None, ""), Group(length.value, "l_idx", "l_mask", "[:, None]"),
                      Group(inner.value, "n_idx", "n_mask", "[None, :]")]
        tile = "[BLOCK_L, BLOCK_N]"
    pro = Emitter(plan, {"full": pro_groups})
    value, present = pro.gen(sh.source, "full", src)
    value = store_value(value, present, len(pro_groups), tile)
    epi = Emitter(plan, {"full": epi_groups}, values={sh.end: "scanned"})
    epi.counter = pro.counter
    result, present = epi.gen(("node", plan.out), "full", tuple(plan.nodes[plan.out].shape))
    result = store_value(result, present, len(epi_groups), tile)
    variables = common_variables(plan, problem, config, ctx)
    variables["out_alloc"] = "(" + ", ".join(s.expr for s in sh.domain) + ("," if len(sh.domain) == 1 else "") + ")"
    return render_template("scan.py.j2", prologue=pro.outer, value=value, epilogue=epi.outer, result=result,
                           rows=rows, reverse=sh.reverse, padded=padded, shift=sh.before, source_length=src[d],
                           op=scan.name, outer=outer.expr, length=length.expr, inner=inner.expr, **variables)


# --- the search space ----------------------------------------------------------------------------


def space(plan: Plan) -> list[dict[str, Any]]:
    sh = scan_shape(plan)
    d = sh.dim
    outer = math.prod(s.value for s in sh.domain[:d])
    length = sh.domain[d].value
    inner = math.prod(s.value for s in sh.domain[d + 1:])
    p = pow2(length)
    configs: list[dict[str, Any]] = []
    if inner == 1:
        if p <= 4096:  # a row in one tile; several rows per program when rows are short
            bm = max(1, min(pow2(outer), 4096 // p))
            while bm > 1 and math.ceil(outer / bm) < 2 * SMS:
                bm //= 2
            for m in [bm] + [m for m in (1, 2, 4, 8, 16) if m != bm and m * p <= 8192 and m <= pow2(outer)]:
                configs.append({"BLOCK_M": m, "BLOCK_L": max(16, p), "num_warps": _warps(m * p)})
        for bl, w in ((4096, 8), (2048, 4), (8192, 16), (1024, 4), (2048, 8), (4096, 16)):
            if bl < p:
                configs.append({"BLOCK_M": 1, "BLOCK_L": bl, "num_warps": w})
    else:
        bn = 64
        while bn > 16 and outer * math.ceil(inner / bn) < 2 * SMS:
            bn //= 2
        bn = min(bn, max(16, pow2(inner)))
        bl = min(max(16, 2048 // bn), max(16, p))
        configs.append({"BLOCK_L": bl, "BLOCK_N": bn, "num_warps": 4})
        for l, n, w in ((32, 64, 4), (64, 32, 4), (16, 128, 4), (64, 64, 8), (128, 16, 4), (32, 32, 4)):
            configs.append({"BLOCK_L": min(l, max(16, p)), "BLOCK_N": min(n, max(16, pow2(inner))), "num_warps": w})
    return unique(configs)


def _warps(elements: int) -> int:
    return 2 if elements <= 256 else 4 if elements <= 2048 else 8


FAMILY = register(Family(kind="scan", render=render, space=space, claims=('scan',), classify=classify, rank=2))
