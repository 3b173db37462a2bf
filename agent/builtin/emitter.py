"""The emitter: the statements of one kernel for a plan. Every value is computed in float32 in
registers; loads convert to float32. A value is generated for a *target shape*: the shape of the
op that consumes it, so a broadcast operand (a bias of shape [N], a per-row scale [M, 1], a scalar
tensor) is loaded with the index of the consumer's element, exactly as torch broadcasts it.
Reductions run once per program, in one pass over the tile or in a loop over the reduced dims;
every reduction ready at that point shares the loop (agent.builtin.fused: online softmax, Welford's
moments, independent sums)."""
from __future__ import annotations

from typing import Any

from agent.builtin.expressions import expression, literal
from agent.builtin.indexing import Group, expanded_strides, group_offset, split_dims
from agent.builtin.ir import Leaf, Node, Plan, Unrecognized


class Emitter:
    """Generates the statements of one kernel for a plan. `spaces` maps a value kind ("full":
    elements of the full tile, "row": reduced values) to its index groups; `reduce_group` is the
    group of "full" that reductions run over."""

    def __init__(self, plan: Plan, spaces: dict[str, list[Group]], *, reduce_group: int | None = None,
                 looped: bool = False, loop: dict[str, Any] | None = None, acc: str | None = None,
                 values: dict[int, str] | None = None) -> None:
        self.plan = plan
        self.spaces = spaces
        self.reduce_group = reduce_group
        self.looped = looped
        self.loop = loop or {}
        self.acc = acc  # the matrix product's accumulator name
        self.values = values or {}  # node index -> the name the template computed it in (a pool, a scan)
        self.outer: list[str] = []
        self.body: list[str] = self.outer
        self.full_memo: dict[Any, tuple[str, frozenset[int]]] = {}
        self.row_memo: dict[Any, tuple[str, frozenset[int]]] = {}
        self.counter = 0
        self.loads = 0

    def fresh(self, prefix: str = "v") -> str:
        self.counter += 1
        return f"{prefix}{self.counter}"

    def shape(self, ref) -> tuple[int, ...]:
        if not isinstance(ref, tuple):
            return ()
        return self.plan.leaves[ref[1]].shape if ref[0] == "leaf" else self.plan.nodes[ref[1]].shape

    def _emit(self, kind: str, line: str) -> None:
        (self.body if kind == "full" else self.outer).append(line)

    def gen(self, ref, kind: str, target: tuple[int, ...]) -> tuple[str, frozenset[int]]:
        """A name (or literal) holding `ref` for elements of `target` (a shape it broadcasts to)."""
        if not isinstance(ref, tuple):
            return literal(ref), frozenset()
        memo = self.full_memo if kind == "full" else self.row_memo
        key = (ref, target)
        if key in memo:
            return memo[key]
        if ref[0] == "node" and ref[1] in self.values:
            if kind != "full" or self._aligned(self.plan.nodes[ref[1]].shape, target) != target:
                raise Unrecognized(f"the {self.plan.nodes[ref[1]].op} result is broadcast")
            return self.values[ref[1]], frozenset(range(len(self.spaces["full"])))
        if ref[0] == "leaf":
            result = self._load(self.plan.leaves[ref[1]], kind, target)
        else:
            result = self._node(self.plan.nodes[ref[1]], ref[1], kind, target)
        memo[key] = result
        return result

    def _groups(self, kind: str, target: tuple[int, ...]) -> tuple[list[Group], list[list[int]]]:
        groups = self.spaces[kind]
        return groups, split_dims(target, [g.size for g in groups])

    def _load(self, leaf: Leaf, kind: str, target: tuple[int, ...]) -> tuple[str, frozenset[int]]:
        groups, dims = self._groups(kind, target)
        strides = expanded_strides(leaf.shape, leaf.strides, target)
        parts, masks, present = [], [], set()
        for i, (group, ds) in enumerate(zip(groups, dims)):
            offset = group_offset(group.var, [target[d] for d in ds], [strides[d] for d in ds])
            if offset is None:
                continue
            present.add(i)
            simple = offset.replace("_", "").isalnum()
            parts.append((offset if simple else f"({offset})") + group.suffix if group.suffix else offset)
            if group.mask:
                masks.append(f"{group.mask}{group.suffix}")
        ptr = f"in{self.plan.leaves.index(leaf)}_ptr"
        name = self.fresh()
        self.loads += 1
        if not parts:
            self._emit(kind, f"{name} = tl.load({ptr}).to(tl.float32)")
        else:
            mask = " & ".join(masks)
            mask_arg = f", mask={mask}, other=0.0" if mask else ""
            self._emit(kind, f"{name} = tl.load({ptr} + {' + '.join(parts)}{mask_arg}).to(tl.float32)")
        return name, frozenset(present)

    def _aligned(self, shape: tuple[int, ...], target: tuple[int, ...]) -> tuple[int, ...]:
        if len(shape) > len(target):
            raise Unrecognized(f"shape {list(shape)} does not broadcast to {list(target)}")
        return (1,) * (len(target) - len(shape)) + tuple(shape)

    def _node(self, node: Node, index: int, kind: str, target: tuple[int, ...]) -> tuple[str, frozenset[int]]:
        if node.op == "mm":
            if kind != "full" or self._aligned(node.shape, target) != target or self.acc is None:
                raise Unrecognized("the matrix product's result is broadcast")
            return self.acc, frozenset(range(len(self.spaces["full"])))
        if node.op == "reduce" or ("reduced", index) in self.row_memo:  # or a value a fused loop holds (a mean)
            return self._reduced(node, index, kind, target)
        if node.name == "view":
            if self._aligned(node.shape, target) != target:
                raise Unrecognized("a reshaped value is broadcast")
            source = node.args[0]
            return self.gen(source, kind, self.shape(source))
        if _broadcast_ok(node.shape, target) is False:
            raise Unrecognized(f"shape {list(node.shape)} does not broadcast to {list(target)}")
        operands = [self.gen(a, kind, target) for a in node.args]
        text, _ = expression(node, [o[0] for o in operands])
        present = frozenset().union(*[o[1] for o in operands]) if operands else frozenset()
        if not present and all(not isinstance(a, tuple) for a in node.args):
            return text, present
        name = self.fresh()
        self._emit(kind, f"{name} = {text}")
        return name, present

    def _reduced(self, node: Node, index: int, kind: str, target: tuple[int, ...]) -> tuple[str, frozenset[int]]:
        """A reduction's result: computed once per program (a loop over the reduced dims)."""
        if self.reduce_group is None:
            raise Unrecognized("a reduction in a kernel without one")
        full_groups = self.spaces["full"]
        aligned = self._aligned(node.shape, target)
        if kind == "full":
            groups, dims = self._groups("full", target)
            for i, ds in enumerate(dims):
                want = [1] * len(ds) if i == self.reduce_group else [target[d] for d in ds]
                if [aligned[d] for d in ds] != want:
                    raise Unrecognized("a reduced value broadcast along other dims than it was reduced over")
        elif aligned != target:
            raise Unrecognized("a reduced value broadcast")
        row_groups = frozenset(i for i in range(len(full_groups)) if i != self.reduce_group) if kind == "full" \
            else frozenset(range(len(self.spaces["row"])))
        key = ("reduced", index)
        if key in self.row_memo:
            return self.row_memo[key][0], row_groups
        # the reduction's input, over the full tile
        source = node.args[0]
        full = tuple(self.plan.full_shape)
        combine = {"sum": ("tl.sum", "0.0", "{a} + {v}"), "max": ("tl.max", '(-float("inf"))', "tl.maximum({a}, {v})"),
                   "min": ("tl.min", 'float("inf")', "tl.minimum({a}, {v})")}[node.name]
        axis = 1 if self.reduce_group == len(full_groups) - 1 and len(full_groups) == 2 else 0
        keep = "[:, None]" if axis == 1 else "[None, :]"
        result = self.fresh("r")
        everything = frozenset(range(len(full_groups)))
        if not self.looped:
            value, present = self.gen(source, "full", full)
            masked = self.fresh()
            tile_mask = self.loop["mask"]
            if present != everything:
                value = f"tl.broadcast_to({value}, {self.loop['tile']})"
            self.body.append(f"{masked} = tl.where({tile_mask}, {value}, {combine[1]})")
            self.body.append(f"{result} = {combine[0]}({masked}, axis={axis}){keep}")
        else:  # every reduction ready now shares one loop (online and moments pairs too): agent.builtin.fused
            from agent.builtin.fused import fused_loop, ready

            fused_loop(self, ready(self, index), axis, keep, everything)
            return self.row_memo[key][0], row_groups
        self.row_memo[key] = (result, row_groups)
        return result, row_groups

    def _online(self, node: Node) -> tuple[Any, int] | None:
        """(g, index of M) when `node` is sum(exp(g - M)) with M = max(g) over the same dims, kept
        dims (softmax, log-softmax, logsumexp): then both come from one loop (online softmax)."""
        nodes = self.plan.nodes
        e = node.args[0]
        if node.name != "sum" or not (isinstance(e, tuple) and e[0] == "node") or nodes[e[1]].name != "exp":
            return None
        d = nodes[e[1]].args[0]
        if not (isinstance(d, tuple) and d[0] == "node") or nodes[d[1]].name != "sub":
            return None
        g, m = nodes[d[1]].args
        if not (isinstance(m, tuple) and m[0] == "node"):
            return None
        mx = nodes[m[1]]
        if mx.op != "reduce" or mx.name != "max" or mx.args[0] != g or mx.attrs["dims"] != node.attrs["dims"] \
                or not mx.attrs["keepdim"] or self.shape(g) != tuple(self.plan.full_shape):
            return None
        return g, m[1]


def _broadcast_ok(shape: tuple[int, ...], target: tuple[int, ...]) -> bool:
    if len(shape) > len(target):
        return False
    pad = len(target) - len(shape)
    return all(s in (1, target[pad + i]) for i, s in enumerate(shape))
