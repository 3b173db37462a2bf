"""Fused reduction loops: every reduction whose input is ready (it needs no reduction not yet
computed) shares one loop over the reduced dims, so the tensor is read once for all of them
(an L1 row sum and an L2 row norm, the norms of cosine similarity, a max and a var).

Two pairs of dependent reductions also share a loop:

- online softmax: M = max(g) and S = sum(exp(g - M)), with running per-lane maxima and the partial
  sums rescaled whenever a lane's maximum grows (lanes that saw nothing stay 0);
- moments: A = sum(g) and B = sum((g - A / n)^2), the mean and the sum of squared deviations of
  layer, group, instance and batch norm and of var/std: Welford's update per lane (each valid lane
  has seen the same count, since only the last tile of a loop is masked), then the lanes combined
  with Chan's formula. One pass instead of two.

A loop's result per program is a `Partial`: agent.builtin.split stores it when a row's reduction is
split across programs and combines the stored partials in a fixed order; otherwise the lanes'
combination is the reduced value (agent.builtin.emitter's looped reductions come here)."""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from agent.builtin.ir import Node, Plan, Unrecognized

if TYPE_CHECKING:
    from agent.builtin.emitter import Emitter

INF = 'float("inf")'


@dataclass
class Partial:
    """What one loop yields per program for one reduction (or a fused pair)."""

    kind: str  # sum | max | min | online | moments
    nodes: tuple[int, ...]  # the reductions it yields: (i,); online: (S, M); moments: (A, B)
    values: tuple[str, ...]  # names of the program's partials: (r,); online: (m, s); moments: (n, mean, m2)


def is_node(ref: Any) -> bool:
    return isinstance(ref, tuple) and ref[0] == "node"


def reduction_deps(nodes: list[Node], ref: Any, memo: dict[Any, frozenset[int]] | None = None) -> frozenset[int]:
    """The reductions `ref` depends on, through elementwise nodes (not through other reductions)."""
    memo = {} if memo is None else memo
    if not is_node(ref):
        return frozenset()
    if ref in memo:
        return memo[ref]
    node = nodes[ref[1]]
    if node.op == "reduce":
        found = frozenset({ref[1]})
    else:
        found = frozenset().union(*[reduction_deps(nodes, a, memo) for a in node.args]) if node.args else frozenset()
    memo[ref] = found
    return found


def moments(plan: Plan, index: int) -> tuple[Any, int, int] | None:
    """(g, index of A, index of the mean A * (1/n)) when reduction `index` is B = sum((g - A * (1/n))^2)
    with A = sum(g) over the same dims, kept (a mean and the squared deviations from it)."""
    nodes = plan.nodes
    node = nodes[index]
    if node.op != "reduce" or node.name != "sum" or not is_node(node.args[0]):
        return None
    sq = nodes[node.args[0][1]]
    if sq.name == "mul" and sq.args[0] == sq.args[1]:
        d = sq.args[0]
    elif sq.name == "pow" and len(sq.args) == 2 and sq.args[1] == 2.0:
        d = sq.args[0]
    else:
        return None
    if not is_node(d) or nodes[d[1]].name != "sub":
        return None
    g, m = nodes[d[1]].args
    if not is_node(m) or nodes[m[1]].name != "mul":
        return None
    a, c = nodes[m[1]].args
    if is_node(c) and not is_node(a):
        a, c = c, a
    if not is_node(a) or is_node(c) or isinstance(c, tuple):
        return None
    an = nodes[a[1]]
    if an.op != "reduce" or an.name != "sum" or an.args[0] != g or an.attrs["dims"] != node.attrs["dims"] \
            or not an.attrs["keepdim"]:
        return None
    full = tuple(plan.full_shape)
    shape = plan.leaves[g[1]].shape if isinstance(g, tuple) and g[0] == "leaf" else \
        (plan.nodes[g[1]].shape if is_node(g) else ())
    if shape != full:
        return None
    count = math.prod(full[d] for d in node.attrs["dims"])
    if not math.isclose(float(c) * count, 1.0, rel_tol=1e-6):
        return None
    return g, a[1], m[1]


def _online(em: Emitter, index: int) -> tuple[Any, int] | None:
    node = em.plan.nodes[index]
    return em._online(node) if node.op == "reduce" else None


def groups(em: Emitter, indices: list[int]) -> list[tuple[str, tuple[int, ...], Any]]:
    """The loop's reductions as (kind, nodes, input): online and moments pairs fused."""
    plan = em.plan
    partners: dict[int, tuple[str, tuple[int, ...], Any]] = {}
    for i in indices:
        found = _online(em, i)
        if found is not None and found[1] in indices:
            partners[i] = partners[found[1]] = ("online", (i, found[1]), found[0])
            continue
        found = moments(plan, i)
        if found is not None and found[1] in indices:
            partners[i] = partners[found[1]] = ("moments", (found[1], i), found[0])
    out, seen = [], set()
    for i in indices:
        if i in seen:
            continue
        group = partners.get(i) or (plan.nodes[i].name, (i,), plan.nodes[i].args[0])
        seen.update(group[1])
        out.append(group)
    return out


def ready_after(em: Emitter, done: set[int]) -> list[int]:
    """The reductions not in `done` that one loop can compute once `done` are: those whose input
    needs only reductions in `done`, and the partner of a pair whose other half is among them."""
    plan = em.plan
    memo: dict[Any, frozenset[int]] = {}
    pending = [i for i, n in enumerate(plan.nodes) if n.op == "reduce" and i not in done]
    deps = {i: reduction_deps(plan.nodes, plan.nodes[i].args[0], memo) for i in pending}
    pair = {}
    for i in pending:
        found = _online(em, i) or moments(plan, i)
        if found is not None and found[1] in pending:
            pair[i] = found[1]
    out = []
    for i in pending:
        allowed = done | ({pair[i]} if i in pair and deps[pair[i]] <= done else set())
        if deps[i] <= allowed:
            out.append(i)
    return out


def ready(em: Emitter, first: int) -> list[int]:
    """What one loop computes when the emitter asks for reduction `first`: `first` and every other
    reduction ready then."""
    out = ready_after(em, {i for (tag, i) in em.row_memo if tag == "reduced"})
    if first not in out:  # never expected: the emitter asks for a reduction whose input is ready
        return [first]
    return [first] + [i for i in out if i != first]


def levels(em: Emitter) -> list[list[int]]:
    """The plan's reductions in loops: each level's inputs need only the levels before it."""
    done: set[int] = set()
    out = []
    total = sum(1 for n in em.plan.nodes if n.op == "reduce")
    while len(done) < total:
        batch = ready_after(em, done)
        if not batch:
            raise Unrecognized("reductions that depend on each other in a cycle")
        out.append(batch)
        done.update(batch)
    return out


def fused_loop(em: Emitter, indices: list[int], axis: int, keep: str, everything: frozenset[int]) -> list[Partial]:
    """One loop computing the reductions `indices` (em.loop: its tile, mask, header and setup),
    written to em.outer; each reduced value is remembered in em.row_memo. Returns the partials."""
    plan = em.plan
    full = tuple(plan.full_shape)
    loop = em.loop
    tile, mask = loop["tile"], loop["mask"]
    saved_body, saved_memo = em.body, em.full_memo
    em.body, em.full_memo = [], {}
    work = []
    for kind, nodes, source in groups(em, indices):
        value, present = em.gen(source, "full", full)
        if present != everything:
            value = f"tl.broadcast_to({value}, {tile})"
        work.append((kind, nodes, value))
    body = em.body
    em.body, em.full_memo = saved_body, saved_memo
    init, update, post, partials = [], [], [], []
    inv = None
    for kind, nodes, value in work:
        if kind in ("sum", "max", "min"):
            acc, r = em.fresh("acc"), em.fresh("r")
            neutral = {"sum": "0.0", "max": f"(-{INF})", "min": INF}[kind]
            init.append(f"{acc} = tl.full({tile}, {neutral}, tl.float32)")
            masked = f"tl.where({mask}, {value}, {neutral})"
            update.append(f"{acc} = {acc} + {masked}" if kind == "sum" else f"{acc} = tl.{kind}imum({acc}, {masked})")
            post.append(f"{r} = tl.{kind}({acc}, axis={axis}){keep}")
            em.row_memo[("reduced", nodes[0])] = (r, frozenset())
            partials.append(Partial(kind, nodes, (r,)))
        elif kind == "online":
            m_acc, s_acc, v, m_new, m_safe = (em.fresh(p) for p in ("macc", "sacc", "v", "v", "v"))
            m_row, m_row_safe, s_row = em.fresh("r"), em.fresh("v"), em.fresh("r")
            init += [f"{m_acc} = tl.full({tile}, -{INF}, tl.float32)", f"{s_acc} = tl.full({tile}, 0.0, tl.float32)"]
            update += [f"{v} = tl.where({mask}, {value}, -{INF})",
                       f"{m_new} = tl.maximum({m_acc}, {v})",
                       f"{m_safe} = tl.where({m_new} == -{INF}, 0.0, {m_new})",
                       f"{s_acc} = {s_acc} * tl.exp({m_acc} - {m_safe}) + tl.exp({v} - {m_safe})",
                       f"{m_acc} = {m_new}"]
            post += [f"{m_row} = tl.max({m_acc}, axis={axis}){keep}",
                     f"{m_row_safe} = tl.where({m_row} == -{INF}, 0.0, {m_row})",
                     f"{s_row} = tl.sum({s_acc} * tl.exp({m_acc} - {m_row_safe}), axis={axis}){keep}"]
            s_index, m_index = nodes
            em.row_memo[("reduced", m_index)] = (m_row, frozenset())
            em.row_memo[("reduced", s_index)] = (s_row, frozenset())
            partials.append(Partial(kind, nodes, (m_row, s_row)))
        else:  # moments: Welford per lane, the lanes combined with Chan's formula
            if inv is None:
                inv = em.fresh("inv")
                update.append(f"{inv} = 1.0 / ((r0 - {loop.get('start', '0')}) // {loop.get('step', 'BLOCK_R')} + 1)")
            n_acc, mean_acc, m2_acc, delta = (em.fresh(p) for p in ("nacc", "meanacc", "m2acc", "v"))
            n, shift, mean, dev, m2, a = (em.fresh(p) for p in ("r", "v", "r", "v", "r", "r"))
            init += [f"{n_acc} = tl.full({tile}, 0.0, tl.float32)", f"{mean_acc} = tl.full({tile}, 0.0, tl.float32)",
                     f"{m2_acc} = tl.full({tile}, 0.0, tl.float32)"]
            update += [f"{delta} = tl.where({mask}, {value} - {mean_acc}, 0.0)",
                       f"{n_acc} = {n_acc} + tl.where({mask}, 1.0, 0.0)",
                       f"{mean_acc} = {mean_acc} + {delta} * {inv}",
                       f"{m2_acc} = {m2_acc} + tl.where({mask}, {delta} * ({value} - {mean_acc}), 0.0)"]
            # the lanes' means summed as deviations from the largest (accurate far from zero)
            post += [f"{n} = tl.sum({n_acc}, axis={axis}){keep}",
                     f"{shift} = tl.max(tl.where({n_acc} > 0.0, {mean_acc}, -{INF}), axis={axis}){keep}",
                     f"{shift} = tl.where({n} > 0.0, {shift}, 0.0)",
                     f"{mean} = {shift} + tl.sum({n_acc} * ({mean_acc} - {shift}), axis={axis}){keep} "
                     f"/ tl.maximum({n}, 1.0)",
                     f"{dev} = {mean_acc} - {mean}",
                     f"{m2} = tl.sum({m2_acc} + {n_acc} * {dev} * {dev}, axis={axis}){keep}",
                     f"{a} = {n} * {mean}"]
            a_index, b_index = nodes
            em.row_memo[("reduced", a_index)] = (a, frozenset())
            em.row_memo[("reduced", b_index)] = (m2, frozenset())
            em.row_memo[("reduced", moments(plan, b_index)[2])] = (mean, frozenset())  # the mean itself, unrounded
            partials.append(Partial(kind, nodes, (n, mean, m2)))
    em.outer.extend(init)
    em.outer.append(loop["header"])
    em.outer.extend("    " + line for line in loop["setup"])
    em.outer.extend("    " + line for line in body + update)
    em.outer.extend(post)
    return partials
