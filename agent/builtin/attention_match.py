"""Recognizing scaled dot-product attention in the traced aten graph (the `attention` plan kind,
agent.builtin.attention drafts it).

Both forms KernelBench writes trace to the same aten ops at the level make_fx records (on the
meta device `F.scaled_dot_product_attention` decomposes into its math form):

    out = bmm(softmax(bmm(q * a, kᵀ * b) * c [+ causal mask]), v)

The graph is read backwards from the output: the second product, the softmax (`_softmax` or
`_safe_softmax`, over the last dim, casts around it), the scores (scalar multiplications and
divisions folded into one scale; a causal mask built in forward as `masked_fill(.., tril == 0,
-inf)`, `masked_fill(.., triu(.., 1), -inf)`, `where(tril, s, -inf)` or `+ where(tril, 0, -inf)`;
or a mask tensor from an input or parameter, which the kernel reads), the first product, and each
operand down to a forward input or parameter (the product's batch flattening, casts, scalar
factors, and k's transpose peeled off; views and transposes below those are the leaf's glue,
replayed in torch). Anything else on that path - elementwise work, dropout, a mask computed from
something - declines with a one-line reason. A graph whose output does not depend on two products
and a softmax is not attention: `match` returns None and the other kinds classify it.
"""
from __future__ import annotations

import math
from typing import Any

from agent.builtin.ir import FLOAT_DTYPES, Leaf, Node, Plan, Unrecognized
from agent.builtin.load import op_name, placeholder_sources

SOFTMAX = {"_softmax", "_safe_softmax", "softmax"}
PRODUCTS = {"bmm", "mm", "matmul"}
FLATTEN = {"view", "_unsafe_view", "reshape", "alias", "detach", "clone", "contiguous", "expand", "unsqueeze",
           "squeeze"}
GLUE = {"view", "_unsafe_view", "reshape", "t", "transpose", "permute", "unsqueeze", "squeeze", "alias", "detach",
        "clone", "contiguous", "_to_copy", "select", "slice", "expand"}
MASK_PEEL = {"view", "_unsafe_view", "reshape", "alias", "detach", "clone", "contiguous", "expand", "unsqueeze",
             "_to_copy", "squeeze"}


def _name(node: Any) -> str:
    return op_name(node.target)


def _is_call(node: Any) -> bool:
    import torch

    return isinstance(node, torch.fx.Node) and node.op == "call_function"


def _shape(node: Any) -> tuple[int, ...]:
    return tuple(int(s) for s in node.meta["val"].shape)


def _scalar(x: Any) -> float | None:
    return float(x) if isinstance(x, (int, float)) and not isinstance(x, bool) else None


def looks_like_attention(graph: Any) -> bool:
    """Two matrix products and a softmax that the output depends on: the graph is attention or
    nothing the other kinds take."""
    output = next(n for n in graph.graph.nodes if n.op == "output")
    live, stack = set(), [output]
    while stack:
        node = stack.pop()
        if node not in live:
            live.add(node)
            stack.extend(node.all_input_nodes)
    names = [_name(n) for n in live if _is_call(n)]
    return sum(n in PRODUCTS for n in names) >= 2 and any(n in SOFTMAX for n in names)


def match(traced: Any) -> Plan | None:
    """The `attention` plan of a traced forward; None when the graph is not attention-shaped;
    Unrecognized (one line) when it is, with something the kernel does not fuse."""
    graph = traced[0]
    if not looks_like_attention(graph):
        return None
    sources = placeholder_sources(traced)
    output = next(n for n in graph.graph.nodes if n.op == "output")
    outs = output.args[0] if isinstance(output.args[0], (list, tuple)) else [output.args[0]]
    if len(outs) != 1:
        raise Unrecognized(f"attention returning {len(outs)} values; the kernel writes one tensor")
    top = outs[0]
    node, chain = top, []  # the ops after the second product, last first
    while _is_call(node) and _name(node) in GLUE:
        chain.append(node)
        node = node.args[0]
    if not (_is_call(node) and _name(node) in PRODUCTS):
        raise Unrecognized(f"work after the attention (aten.{_name(node) if _is_call(node) else node.op} on its "
                           "output; the kernel writes softmax(q kᵀ) v itself)")
    second = node
    probs = _peel(second.args[0], FLATTEN | {"_to_copy"})
    if not (_is_call(probs) and _name(probs) in SOFTMAX):
        what = _name(probs) if _is_call(probs) else "an input"
        if what in ("native_dropout", "bernoulli", "rand", "rand_like", "mul"):
            raise Unrecognized(f"dropout on the attention weights (aten.{what}); the kernel has no random numbers")
        raise Unrecognized(f"aten.{what} between the softmax and the product with v")
    dim = int(probs.args[1])
    if dim not in (-1, len(_shape(probs)) - 1):
        raise Unrecognized(f"a softmax over dim {dim} of the scores (attention normalizes over the keys, dim -1)")
    scale, causal, mask, first = _scores(probs.args[0], sources)
    q, q_scale, q_glue, q_op = _operand(first.args[0], sources, "q", transposed=False)
    k, k_scale, k_glue, k_op = _operand(first.args[1], sources, "k", transposed=True)
    v, v_scale, v_glue, v_op = _operand(second.args[1], sources, "v", transposed=False)
    if v_scale != 1.0:
        raise Unrecognized("a scaling of v before the attention")
    scale *= q_scale * k_scale
    qs, ks, vs = _shape(q_op), _shape(k_op), _shape(v_op)
    if len(qs) not in (3, 4) or len(ks) != len(qs) or len(vs) != len(qs):
        raise Unrecognized(f"attention over q, k, v of shapes {list(qs)}, {list(ks)}, {list(vs)} (the kernel takes "
                           "[batch, heads, seq, dim] or [batch, seq, dim])")
    if qs[:-2] != ks[:-2] or qs[:-2] != vs[:-2]:
        raise Unrecognized(f"k or v broadcast against q ({list(qs)}, {list(ks)}, {list(vs)}: grouped-query attention)")
    if ks[-1] != qs[-1] or vs[-2] != ks[-2]:
        raise Unrecognized(f"q, k, v of shapes {list(qs)}, {list(ks)}, {list(vs)} do not fit")
    dtypes = {str(x.meta["val"].dtype) for x in (q_op, k_op, v_op)}
    if len(dtypes) != 1 or next(iter(dtypes)) not in FLOAT_DTYPES or "torch.float64" in dtypes:
        raise Unrecognized(f"attention over {', '.join(sorted(dtypes))} tensors")
    attention_shape = qs[:-1] + (vs[-1],)
    out_glue = _output_glue(second, chain[::-1], attention_shape)
    out_shape = _shape(top)
    out_dtype = str(top.meta["val"].dtype)
    if out_dtype not in FLOAT_DTYPES or out_dtype == "torch.float64":
        raise Unrecognized(f"the attention's output is {out_dtype}")
    operands = [(q, q_glue, q_op), (k, k_glue, k_op), (v, v_glue, v_op)]
    attrs = {"scale": scale, "causal": causal, "pattern": "attention", "safe": _name(probs) == "_safe_softmax",
             "mask": None, "mask_factor": 1.0}
    if mask is not None:  # a mask tensor read in the kernel: (mode, source, glue, node, factor)
        mode, source, glue, op, factor = mask
        scores = qs[:-1] + (ks[-2],)
        if len(_shape(op)) > len(scores) or any(m not in (1, n) for m, n in zip(_shape(op)[::-1], scores[::-1])):
            raise Unrecognized(f"an attention mask of shape {list(_shape(op))} for scores of shape {list(scores)}")
        operands.append((source, glue, op))
        attrs["mask"], attrs["mask_factor"] = mode, factor
    leaves = [Leaf(src[0], src[1], glue, _shape(op), tuple(int(s) for s in op.meta["val"].stride()),
                   str(op.meta["val"].dtype)) for src, glue, op in operands]
    node = Node("attention", "attention", [("leaf", i) for i in range(len(leaves))], attention_shape, out_dtype,
                attrs=attrs)
    form = "causal attention" if causal else "attention"
    masked = {None: "", "add": " + mask", "keep_nonzero": " masked (mask != 0 kept)",
              "keep_zero": " masked (mask == 0 kept)"}[attrs["mask"]]
    summary = (f"{form} softmax(q kᵀ * {scale:.6g}{masked}) v, q {'x'.join(map(str, qs))}, "
               f"k {'x'.join(map(str, ks))}, v {'x'.join(map(str, vs))}")
    return Plan(kind="attention", leaves=leaves, nodes=[node], out=0, out_glue=out_glue, out_shape=out_shape,
                out_dtype=out_dtype, full_shape=qs, red_dims=(len(qs) - 1,), summary=summary)


def _output_glue(product: Any, chain: list[Any], shape: tuple[int, ...]) -> list[tuple[str, list[Any]]]:
    """The glue on the attention's output (a transpose back to [batch, seq, heads, dim], a merge
    of the heads), replayed in torch on the kernel's [.., seq, dim] output; casts are the output's
    dtype, which the kernel writes."""
    start = 0
    if _shape(product) != shape:  # the product's batch unflattened: views up to the attention's shape
        start = next((i + 1 for i, n in enumerate(chain) if _shape(n) == shape), None)
        if start is None or any(_name(n) not in FLATTEN for n in chain[:start]):
            raise Unrecognized("the attention's output is reshaped before its batch is restored")
    glue = []
    for node in chain[start:]:
        name = _name(node)
        if name == "_to_copy":
            continue
        if name == "expand" and _shape(node) != _shape(node.args[0]):
            raise Unrecognized("the attention's output broadcast")
        glue.append((name, [list(a) if isinstance(a, (list, tuple)) else a for a in node.args[1:]]))
    return glue


def _peel(node: Any, ops: set[str]) -> Any:
    while _is_call(node) and _name(node) in ops:
        node = node.args[0]
    return node


def _scores(node: Any, sources: dict[Any, tuple[str, Any]]) -> tuple[float, bool, tuple | None, Any]:
    """(scale, causal, a mask tensor's (mode, source, glue, node, factor) or None, the first
    product) of the softmax's input. The factor is the scale applied after an additive mask."""
    scale, causal, mask = 1.0, False, None

    def found(kind: Any) -> None:
        nonlocal causal, mask
        if kind == "causal":
            causal = True
        elif mask is not None:
            raise Unrecognized("two attention masks")
        else:
            mask = kind[:4] + (scale,)
        if scale <= 0:
            raise Unrecognized("a mask, then a scale that is not positive")

    while _is_call(node):
        name = _name(node)
        if name in PRODUCTS:
            return scale, causal, mask, node
        if name in FLATTEN or (name == "_to_copy" and str(node.meta["val"].dtype) in FLOAT_DTYPES):
            node = node.args[0]
        elif name in ("mul", "div") and len(node.args) == 2 and _scalar(node.args[1]) is not None:
            c = _scalar(node.args[1])
            scale = scale * c if name == "mul" else scale / c
            node = node.args[0]
        elif name == "masked_fill" and _fill(node.args[2], scale) is not None:
            found(_mask(node.args[1], sources, drop=True, fill=_fill(node.args[2], scale)))
            node = node.args[0]
        elif name == "where" and len(node.args) == 3 and _fill(node.args[2], scale) is not None:
            found(_mask(node.args[0], sources, drop=False, fill=_fill(node.args[2], scale)))  # where(keep, s, -inf)
            node = node.args[1]
        elif name == "where" and len(node.args) == 3 and _fill(node.args[1], scale) is not None:
            found(_mask(node.args[0], sources, drop=True, fill=_fill(node.args[1], scale)))  # where(drop, -inf, s)
            node = node.args[2]
        elif name == "add" and len(node.args) == 2 and _is_call(node.args[1]) and _name(node.args[1]) == "where":
            where = node.args[1]
            if not (_constant(where.args[1]) == 0.0 and _constant(where.args[2]) == -math.inf):
                raise Unrecognized("an additive attention mask other than where(causal, 0, -inf)")
            found(_mask(where.args[0], sources, drop=False))
            node = node.args[0]
        elif name == "add" and len(node.args) == 2 and _from_source(node.args[1], sources) is not None:
            source, glue, op = _to_source(node.args[1], sources, "the additive attention mask")
            found(("add", source, glue, op))
            node = node.args[0]
        elif name in ("masked_fill", "where"):
            raise Unrecognized(f"aten.{name} with a fill that does not drop the scores (-inf, or below -1e4 after the "
                               "scale that follows it)")
        else:
            raise Unrecognized(f"aten.{name} on the attention scores (only a scale and a mask are fused)")
    raise Unrecognized("attention scores that are not a product of q and k")


def _fill(node: Any, scale: float) -> float | None:
    """The value a mask fills dropped scores with, when it drops them: -inf, or a value that is
    still below -1e4 after the scale that follows it (exp gives exactly 0 there in float32 and
    float16 alike); None for anything else."""
    value = _constant(node)
    if value is None or not (value == -math.inf or value * scale <= -1e4):
        return None
    return value


def _constant(node: Any) -> float | None:
    if _scalar(node) is not None:
        return _scalar(node)
    if _is_call(node) and _name(node) in ("scalar_tensor", "full") and node.args:
        return _scalar(node.args[-1] if _name(node) == "full" else node.args[0])
    return None


def _from_source(node: Any, sources: dict[Any, tuple[str, Any]]) -> tuple[str, Any] | None:
    """The input or parameter a mask is read from, if any."""
    stack, seen = [node], set()
    while stack:
        n = stack.pop()
        if n in sources:
            return sources[n]
        if _is_call(n) and n not in seen:
            seen.add(n)
            stack += [a for a in n.args if _is_call(a) or a in sources]
    return None


def _mask(node: Any, sources: dict[Any, tuple[str, Any]], drop: bool, fill: float = -math.inf) -> Any:
    """"causal" for a mask built in forward (tril/triu of ones: checked causal here), or a mask
    tensor read from an input or parameter: (mode, source, glue, node). `drop`: the mask marks
    what is dropped (masked_fill), else what is kept (where). A finite fill is exact only where
    no row loses every key: the causal mask (key 0 is always kept)."""
    if _from_source(node, sources) is None:
        _causal_mask(node, drop)
        return "causal"
    if fill != -math.inf:
        raise Unrecognized(f"a mask tensor filling with {fill:g} (a row with every key dropped averages them; only "
                           "-inf, or the causal mask, is fused)")
    if _is_call(node) and _name(node) in ("eq", "logical_not", "bitwise_not"):
        if _name(node) == "eq" and _scalar(node.args[1]) != 0.0:
            raise Unrecognized("an attention mask compared with a value other than 0")
        node, drop = node.args[0], not drop
    source, glue, op = _to_source(node, sources, "the attention mask")
    return ("keep_zero" if drop else "keep_nonzero", source, glue, op)


def _causal_mask(node: Any, drop: bool) -> None:
    """Check that a mask is the causal one: True above the diagonal when it marks what is dropped
    (masked_fill), True on and below it when it marks what is kept (where). Raises otherwise."""
    node = _peel(node, MASK_PEEL)
    if _is_call(node) and _name(node) in ("eq", "logical_not", "bitwise_not"):
        if _name(node) == "eq" and _scalar(node.args[1]) != 0.0:
            raise Unrecognized("an attention mask other than the causal one")
        node, drop = _peel(node.args[0], MASK_PEEL), not drop
    name = _name(node) if _is_call(node) else ""
    diagonal = int(node.args[1]) if _is_call(node) and len(node.args) > 1 else 0
    ones = _peel(node.args[0], MASK_PEEL) if name in ("tril", "triu") else None
    if ones is None or not (_is_call(ones) and _name(ones) in ("ones", "ones_like")):
        raise Unrecognized("an attention mask other than the causal one (tril/triu of ones)")
    if (drop and name == "triu" and diagonal == 1) or (not drop and name == "tril" and diagonal == 0):
        return
    raise Unrecognized(f"a {name}(diagonal={diagonal}) attention mask (only the causal one is fused)")


def _operand(node: Any, sources: dict[Any, tuple[str, Any]], what: str,
             transposed: bool) -> tuple[tuple[str, Any], float, list[tuple[str, list[Any]]], Any]:
    """(source, scalar factor, glue, the operand's node) of a product's operand: the batch
    flattening, casts, scalar factors (and for k its transpose) peeled off; the views below them
    down to an input or parameter are the leaf's glue."""
    scale, flipped = 1.0, False
    while _is_call(node):
        name = _name(node)
        if name == "expand" and _shape(node) != _shape(node.args[0]):
            raise Unrecognized(f"{what} broadcast in the attention's product (grouped-query attention)")
        if name in FLATTEN - {"unsqueeze", "squeeze"} or (
                name == "_to_copy" and str(node.meta["val"].dtype) in FLOAT_DTYPES):
            node = node.args[0]
        elif name in ("mul", "div") and len(node.args) == 2 and _scalar(node.args[1]) is not None:
            c = _scalar(node.args[1])
            scale = scale * c if name == "mul" else scale / c
            node = node.args[0]
        elif transposed and not flipped and name in ("transpose", "t", "permute") and _swaps_last(node):
            flipped, node = True, node.args[0]
        else:
            break
    if transposed and not flipped:
        raise Unrecognized(f"{what} used untransposed in q kᵀ")
    source, glue, operand = _to_source(node, sources, what)
    return source, scale, glue, operand


def _to_source(node: Any, sources: dict[Any, tuple[str, Any]], what: str) -> tuple[tuple[str, Any], list, Any]:
    """(source, glue, node): the views, slices, transposes and casts from an input or parameter to
    `node` (replayed in torch), or Unrecognized naming the op that computes it."""
    operand, glue = node, []
    while _is_call(node) and _name(node) in GLUE:
        name = _name(node)
        args = [list(a) if isinstance(a, (list, tuple)) else a for a in node.args[1:]]
        if name == "_to_copy":
            args = [str(node.meta["val"].dtype)]
        glue.insert(0, (name, args))
        node = node.args[0]
    if node not in sources:
        found = _name(node) if _is_call(node) else node.op
        raise Unrecognized(f"elementwise work before the attention (aten.{found} on {what}); the kernel reads q, k, v "
                           "and a mask as given")
    return sources[node], glue, operand


def _swaps_last(node: Any) -> bool:
    rank = len(_shape(node))
    if _name(node) == "t":
        return rank == 2
    if _name(node) == "transpose":
        return {int(node.args[1]) % rank, int(node.args[2]) % rank} == {rank - 2, rank - 1}
    perm = [int(p) % rank for p in node.args[1]]
    return perm == list(range(rank - 2)) + [rank - 1, rank - 2]
