"""What a user varies, found by tracing the problem again: the kernels the built-in policy drafts
must compute the reference's function for other batch sizes, sequence lengths and constructor
arguments, not only for the problem's own (ModelNew is a drop-in module).

Recognition traces the forward at the problem's shapes and constructor arguments, so every size
and every scalar in the IR is a number. This module traces it again with one thing changed at a
time, on the meta device (nothing is allocated):

- scalars (agent.builtin.scalars): every float attribute of the module and its submodules, and every
  number given to forward, changed alone: read at run time as a kernel parameter, or `Fixed`. So
  is an int, bool or str attribute (or a tuple of them) the forward reads that holds no size
  (`self.dim`, `self.mode`);
- sizes: the dims of the forward's inputs, grouped by value (a `SizeClass`: every input dim and
  int constructor argument of that value; a dim that traces changed alone is a class of its own,
  so sizes equal by coincidence stay apart), are changed one class at a time to a smaller odd value.
  The class's plan lets the draft (agent.builtin.general) check that the kernel does not depend on
  it and write every size that does as an expression of the inputs' shapes.
"""
from __future__ import annotations

import ast
import re
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from agent.builtin.ir import Plan, Problem
from agent.builtin.load import SCALARS, trace
from agent.builtin.lower import build_plan
from agent.builtin.scalars import (RETRACE_ERRORS, Fixed, Retrace, ScalarArg, Substitutions, attr_expr, input_numbers,
                                    module_scalars, submodule_ints, substitute)


@dataclass
class SizeClass:
    """The input dims (and int constructor arguments) of one value, and the problem traced with
    all of them changed to `varied`: its plan (None, with the reason, when that did not trace)."""

    value: int
    varied: int
    inputs: list[tuple[int, int]]  # (forward input, dim)
    init: list[int | tuple[int, int]]  # positions in get_init_inputs() (k, or (k, j): element j of a tuple)
    name: str  # the forward's local variable holding it
    source: str  # where forward reads it: the first input dim (x.shape[0]), or a parameter's dim
    plan: Plan | None = None
    shapes: list[tuple[int, ...]] = field(default_factory=list)
    reason: str = ""


@dataclass
class Variants:
    shapes: list[tuple[int, ...]]  # the forward inputs' shapes in the problem
    contiguous: list[bool]  # whether each input was (the kernel assumes its strides)
    dtypes: list[str]  # each input's dtype (the output's dtype is drafted from them)
    scalars: list[ScalarArg]
    fixed: list[Fixed]
    classes: list[SizeClass]
    # the problem traced with several classes changed at once: (plan, shapes), or None
    joint: Callable[[tuple[SizeClass, ...]], tuple[Plan, list[tuple[int, ...]]] | None]
    numbers: list[int] = field(default_factory=list)  # the forward inputs that are numbers, not tensors


def analyse(module, entry: str, model, inputs: list, problem: Problem, plan: Plan, cast=None) -> Variants:
    """Trace again with each float attribute and each size class changed; turns the plan's module
    scalars into `Runtime` values in place. `cast`: the half dtype the run casts models to, or None."""
    import torch

    cls = getattr(module, entry)
    with torch.device("meta"):
        init = list(getattr(module, "get_init_inputs", lambda: [])())
    numbers = {i: x for i, x in enumerate(inputs) if type(x) in SCALARS}
    shapes = [() if i in numbers else tuple(int(s) for s in t.shape) for i, t in enumerate(inputs)]
    dtypes = [None if i in numbers else t.dtype for i, t in enumerate(inputs)]

    def retrace(new_init: list, new_shapes: list[tuple[int, ...]], patch: Callable[[Any], None] | None = None,
                values: dict[int, Any] | None = None) -> Plan:
        # sizes changed one class at a time may not fit together (a loss's inputs of two shapes): what
        # torch warns about then is this probe's business, not the user's
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)
            with torch.device("meta"):
                torch.manual_seed(0)
                other = cls(*new_init) if cast is None else cls(*new_init).to(cast)
                given = {**numbers, **(values or {})}
                xs = [given[i] if i in given else torch.empty(s, dtype=d)
                      for i, (s, d) in enumerate(zip(new_shapes, dtypes))]
            if patch is not None:
                patch(other)
            return build_plan(trace(other, xs), problem)

    scalars, fixed, substitutions = module_scalars(model, plan, init, shapes, retrace)
    input_numbers(numbers, problem.input_names, plan, init, shapes, retrace, scalars, fixed, substitutions)
    substitute(plan, substitutions)
    classes = _split(_classes(shapes, init, problem.input_names), init, shapes, problem.input_names, retrace)
    attributes = _forward_attributes(problem.source, entry)
    classes += _constructor_sizes(cls, model, init, classes, attributes)
    _vary(classes, shapes, init)
    for c in classes:
        c.reason = _trace_changed(c, init, shapes, retrace, substitutions)
    slices = _whole_slices(plan, classes)
    for traced_plan in [plan] + [c.plan for c in classes if c.plan is not None]:
        _with_whole_slices(traced_plan, slices)
    # an int attribute read at run time (a head count): forward refuses other values unless the
    # draft leaves it free (agent.builtin.general drops the check then)
    fixed += [Fixed(c.source, c.value) for c in classes if c.plan is not None and ATTRIBUTE.fullmatch(c.source)]
    traced = {c.value for c in classes if c.plan is not None}
    for name in attributes:
        if name == "training":  # nn.Module's own mode flag, which .eval() sets
            continue
        value = getattr(model, name, None)
        items = value if isinstance(value, tuple) else (value,)
        if items and all(type(v) in (int, bool, str) for v in items) and not any(
                type(v) is int and v in traced for v in items):  # a mode, a dim, a flag: not a size
            fixed.append(Fixed(f"self.{name}", value))
    if plan.kind == "fallback":  # its library calls carry the traced ints: a submodule's other settings are baked
        fixed += submodule_ints(model, plan, traced, lambda patch: retrace(init, shapes, patch))
    cache: dict[tuple[str, ...], tuple[Plan, list[tuple[int, ...]]] | None] = {}

    def joint(group: tuple[SizeClass, ...]) -> tuple[Plan, list[tuple[int, ...]]] | None:
        k = tuple(sorted(c.name for c in group))
        if k not in cache:
            new_init, new_shapes = _changed(init, shapes, list(group))
            try:
                cache[k] = (_with_whole_slices(substitute(retrace(new_init, new_shapes), substitutions), slices),
                            new_shapes)
            except RETRACE_ERRORS:
                cache[k] = None  # the draft then treats every size as fixed
        return cache[k]

    return Variants(shapes=shapes, contiguous=[i not in numbers and bool(t.is_contiguous()) for i, t in enumerate(inputs)],
                    dtypes=[str(d) for d in dtypes], scalars=scalars, fixed=fixed, classes=classes, joint=joint,
                    numbers=sorted(numbers))


def _whole_slices(plan: Plan, classes: list[SizeClass]) -> dict[int, list[int]]:
    """A leaf sliced to a size in forward (minGPT's `self.bias[:, :, :t, :t]`) where the slice is the
    whole tensor at the problem's sizes: torch returns the tensor itself (an alias), so the slice is
    not in the problem's trace, but it is in the trace at another size. Returns, per such leaf, the
    dims sliced, for `_with_whole_slices`."""
    found: dict[int, list[int]] = {}
    for j, leaf in enumerate(plan.leaves):
        base = [g for g in leaf.glue if g[0] not in NO_OPS]
        for c in classes:
            if c.plan is None or len(c.plan.leaves) != len(plan.leaves):
                continue
            other = [g for g in c.plan.leaves[j].glue if g[0] not in NO_OPS]
            extra = other[len(base):]
            if extra and [op for op, _ in other[:len(base)]] == [op for op, _ in base] and \
                    all(op == "slice" and _from_the_start(args, len(leaf.shape)) for op, args in extra):
                found[j] = [int(args[0]) % len(leaf.shape) for _, args in extra]
                break
    return found


def _with_whole_slices(plan: Plan, slices: dict[int, list[int]]) -> Plan:
    """The plan with each leaf of `slices` that lacks them sliced along those dims to its whole
    size (no change to its values), so that every trace renders the same glue and the draft reads
    the size at run time (agent.builtin.general) instead of fixing it."""
    for j, dims in slices.items():
        leaf = plan.leaves[j]
        glue = [g for g in leaf.glue if g[0] not in NO_OPS]
        if len(glue) >= len(dims) and all(op == "slice" for op, _ in glue[len(glue) - len(dims):]):
            continue  # sliced in this trace already
        leaf.glue = glue + [("slice", [d, 0, leaf.shape[d]]) for d in dims]
    return plan


NO_OPS = ("alias", "detach")
ATTRIBUTE = re.compile(r"self\.\w+")  # a class read from a module attribute (`self.n_head`)


def _from_the_start(args: list[Any], rank: int) -> bool:
    """aten.slice's (dim, start, end[, step]) from index 0 in steps of 1 along a dim of the tensor."""
    return (len(args) >= 3 and type(args[0]) is int and -rank <= args[0] < rank and args[1] in (0, None)
            and (len(args) < 4 or args[3] in (1, None)))


def _trace_changed(c: SizeClass, init: list, shapes: list[tuple[int, ...]], retrace: Retrace,
                   substitutions: Substitutions) -> str:
    """Trace the problem with class `c` at its varied value, then, where that does not trace (a size
    that must divide by another: groups, heads), at 1.5x its value: c.plan and c.shapes set, and
    "" returned; or why its varied value does not trace (c.varied left as it was)."""
    odd, why = c.varied, ""
    for varied in (odd, c.value + c.value // 2):
        c.varied = varied
        new_init, new_shapes = _changed(init, shapes, [c])
        try:
            c.plan, c.shapes = substitute(retrace(new_init, new_shapes), substitutions), new_shapes
            return ""
        except RETRACE_ERRORS as exc:
            why = why or f"{type(exc).__name__}: {' '.join(str(exc).split())[:160]}"
    c.varied = odd
    return why



def _forward_attributes(source: str, entry: str) -> list[str]:
    """The attributes of `self` the entry class's forward reads."""
    tree = ast.parse(source)
    cls = next((n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == entry), None)
    body = cls.body if cls else []
    forward = next((n for n in body if isinstance(n, ast.FunctionDef) and n.name == "forward"), None)
    if forward is None:
        return []
    names = {n.attr for n in ast.walk(forward)
             if isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name) and n.value.id == "self"}
    return sorted(names)


# --- sizes -----------------------------------------------------------------------------------------


def _classes(shapes: list[tuple[int, ...]], init: list, input_names: list[str]) -> list[SizeClass]:
    by_value: dict[int, SizeClass] = {}
    for i, shape in enumerate(shapes):
        for d, size in enumerate(shape):
            if size > 1:
                by_value.setdefault(size, _of_inputs(size, 0, [(i, d)], [], input_names))
                if (i, d) not in by_value[size].inputs:
                    by_value[size].inputs.append((i, d))
    for k, value in enumerate(init):
        if type(value) is int and value in by_value:
            by_value[value].init.append(k)
        elif isinstance(value, tuple) and all(type(v) is int for v in value):  # LayerNorm((C, H, W))
            for j, v in enumerate(value):
                if v in by_value:
                    by_value[v].init.append((k, j))
    classes = list(by_value.values())
    _vary(classes, shapes, init)
    return classes


def _constructor_sizes(cls, model, init: list, classes: list[SizeClass], attributes: list[str]) -> list[SizeClass]:
    """An int constructor argument no input dim shares (nn.Linear's out_features): a class of its
    own when it sizes a parameter or buffer, which forward then reads it from; or when forward
    reads it from an attribute of the module that follows it (minGPT's `self.n_head`)."""
    import torch

    used = {k for c in classes for k in c.init}
    state = {**dict(model.named_parameters()), **dict(model.named_buffers())}
    out = []
    for k, value in enumerate(init):
        if type(value) is not int or value <= 1 or k in used:
            continue
        changed = list(init)
        changed[k] = (value // 2) | 1 if value > 3 else value + 2
        try:
            with torch.device("meta"):
                other = cls(*changed)
        except (RuntimeError, ValueError, TypeError, IndexError):
            continue
        other_state = {**dict(other.named_parameters()), **dict(other.named_buffers())}
        source = next((f"{attr_expr(name)}.shape[{d}]" for name, t in state.items() if name in other_state
                       for d, size in enumerate(t.shape)
                       if size == value and d < other_state[name].dim() and other_state[name].shape[d] == changed[k]),
                      None)
        if source is None:
            source = next((f"self.{name}" for name in attributes if type(getattr(model, name, None)) is int
                           and getattr(model, name) == value and getattr(other, name, None) == changed[k]), None)
        if source is not None:
            out.append(SizeClass(value, 0, [], [k], _init_name(cls, k), source))
    return out


def _init_name(cls, k: int) -> str:
    """The constructor's name for its argument k (out_features), for forward's local variable."""
    import inspect

    try:
        params = [p for p in inspect.signature(cls.__init__).parameters.values()
                  if p.kind == p.POSITIONAL_OR_KEYWORD][1:]
    except (TypeError, ValueError):
        params = []
    name = params[k].name if k < len(params) else ""
    return f"{name}_size" if name.isidentifier() else f"init{k}_size"


def _of_inputs(value: int, varied: int, inputs: list[tuple[int, int]], init: list[int],
               input_names: list[str]) -> SizeClass:
    """A class read at run time from its first input dim (`x_dim0 = x.shape[0]`)."""
    i, d = inputs[0]
    return SizeClass(value, varied, inputs, init, f"{input_names[i]}_dim{d}", f"{input_names[i]}.shape[{d}]")


def _vary(classes: list[SizeClass], shapes: list[tuple[int, ...]], init: list) -> None:
    """Give each class its own smaller odd value, distinct from every size of the problem."""
    taken = {s for shape in shapes for s in shape} | {v for v in init if type(v) is int} | {
        v for t in init if isinstance(t, tuple) for v in t if type(v) is int}
    for c in classes:
        varied = (c.value // 2) | 1
        while varied <= 1 or varied in taken:
            varied += 2
        c.varied = varied
        taken.add(varied)


def _split(classes: list[SizeClass], init: list, shapes: list[tuple[int, ...]], input_names: list[str],
           retrace: Retrace) -> list[SizeClass]:
    """Sizes equal only by coincidence (a square matrix, H == W, in_features == out_features) are
    separate classes: an input dim of a class that traces changed alone is a class of its own; the
    rest are split by their position among the dims (q, k, v's batch apart from their head dim, both
    64) where each such group traces changed alone; a constructor argument the rest trace without
    leaves the class; the rest stay together."""
    out: list[SizeClass] = []
    for c in classes:
        if len(c.inputs) < 2 and not c.init:  # one input dim (with a constructor int of the same value: split)
            out.append(c)
            continue
        rest = []
        for i, d in c.inputs:
            alone = _of_inputs(c.value, c.varied, [(i, d)], [], input_names)
            try:
                retrace(*_changed(init, shapes, [alone]))
            except RETRACE_ERRORS:
                rest.append((i, d))
                continue
            out.append(alone)
        rest = _split_by_position(c, rest, init, shapes, input_names, retrace, out)
        if rest:  # those that must change together (a batch shared by inputs), with the constructor's
            init_kept = list(c.init)
            for k in c.init:  # a constructor argument that traces unchanged is another size (in == out)
                trial = _of_inputs(c.value, c.varied, rest, [j for j in init_kept if j != k], input_names)
                try:
                    retrace(*_changed(init, shapes, [trial]))
                except RETRACE_ERRORS:
                    continue
                init_kept.remove(k)
            out.append(_of_inputs(c.value, c.varied, rest, init_kept, input_names))
    return out


def _split_by_position(c: SizeClass, rest: list[tuple[int, int]], init: list, shapes: list[tuple[int, ...]],
                       input_names: list[str], retrace: Retrace, out: list[SizeClass]) -> list[tuple[int, int]]:
    """The dims of `rest` (none traces changed alone) grouped by their position counted from the
    end (a head dim is last whatever the rank): each group that traces changed alone, with the rest
    unchanged, joins `out` as a class of its own; the dims left are returned."""
    groups: dict[int, list[tuple[int, int]]] = {}
    for i, d in rest:
        groups.setdefault(d - len(shapes[i]), []).append((i, d))
    if len(groups) < 2:
        return rest
    left = list(rest)
    for group in groups.values():
        trial = _of_inputs(c.value, c.varied, group, [], input_names)
        try:
            retrace(*_changed(init, shapes, [trial]))
        except RETRACE_ERRORS:
            continue
        out.append(trial)
        left = [x for x in left if x not in group]
    return left


def _changed(init: list, shapes: list[tuple[int, ...]], group: list[SizeClass]) -> tuple[list, list[tuple[int, ...]]]:
    new_init = list(init)
    new_shapes = [list(s) for s in shapes]
    for c in group:
        for k in c.init:
            if isinstance(k, tuple):  # an element of a tuple argument
                position, j = k
                new_init[position] = tuple(c.varied if i == j else v for i, v in enumerate(new_init[position]))
            else:
                new_init[k] = c.varied
        for i, d in c.inputs:
            new_shapes[i][d] = c.varied
    return new_init, [tuple(s) for s in new_shapes]
