"""A drafted module general over what a user varies (batch and other sizes, the module's scalars).

The templates render a plan traced at one set of sizes, so every size the kernel and forward
compute with (row widths, strides, a mean's scale, the output's shape, reshapes, the grid) comes out
as a number. The draft renders the problem's plan and each plan agent.builtin.variants traced with
one class of sizes changed, with the same configuration:

- a class is *free* when the renderings differ only in numbers and every number that changes is a
  monomial of the free sizes (`c * x_dim0 * x_dim1`, `1.0 / (x_dim1)`). In forward the number is
  written as that expression, each free size read from the input dim it came from
  (`x_dim0 = x.shape[0]`); in the kernel it becomes a parameter (`size_0`) forward passes;
- every other size is *fixed* (the kernel's structure depends on it): forward checks each input's
  and parameter's shape against what the kernel was drafted for and raises a ValueError naming
  the shape, and so do the module's attributes the kernel bakes in (agent.builtin.scalars.Fixed),
  and a template's own limits (a row wider than a one-tile kernel's tile);
- last, the plan traced with all free classes changed at once must render to the same code with
  the numbers those expressions give there; otherwise every size is fixed.
"""
from __future__ import annotations

import io
import itertools
import math
import re
import tokenize
from collections.abc import Callable
from fractions import Fraction
from typing import Any

from agent.builtin.ir import Plan, Problem, Unrecognized
from agent.builtin.templates import Context, local_name, needs_int64
from agent.builtin.scalars import Fixed
from agent.builtin.variants import SizeClass, Variants

Render = Callable[[Plan, Problem, dict[str, Any], Context], str]
EXPONENTS = (0, 1, 2, -1, -2, 3, -3)  # a size, an area, a reciprocal (a mean's scale), a volume (tied sizes: H == W)
SKIPPED = (tokenize.NL, tokenize.INDENT, tokenize.DEDENT, tokenize.ENDMARKER, tokenize.COMMENT)
PUNCTUATION = {",", "(", ")", "[", "]", "=", "\n", ""}  # a sum needs no parentheses between these


def draft_general(plan: Plan, problem: Problem, config: dict[str, Any], render: Render) -> str:
    variants = problem.variants
    if variants is None:
        raise Unrecognized("the problem was not traced at other sizes (agent.builtin.variants)")
    i64 = needs_int64(plan)

    def rendered(p: Plan, shapes: list[tuple[int, ...]], free: list[SizeClass], sizes: list[tuple[str, str]],
                 strict: bool = False) -> str:
        if p.kind != plan.kind:  # another family's plan at those sizes (a GEMV at 10 outputs, a GEMM at more):
            # the kernel's structure depends on the size, which stays fixed; `config` is not its family's
            raise Unrecognized(f"at other sizes the problem is a {p.kind} plan, not a {plan.kind} one")
        ctx = Context(guards=guard_lines(problem, variants, shapes, free), i64=i64, general=bool(free),
                      strict=strict, notes=notes(problem, variants, free), sizes=sizes,
                      origin=plan)
        return render(p, problem, config, ctx)

    def one(c: SizeClass | None, free: list[SizeClass], sizes: list[tuple[str, str]]) -> str:
        if c is None:
            return rendered(plan, variants.shapes, free, sizes, strict=True)
        return rendered(c.plan, c.shapes, free, sizes)

    def joint(free: list[SizeClass], sizes: list[tuple[str, str]], fitted: Fitted, base: str) -> bool:
        return _joint_holds(variants, free, fitted, lambda p, shapes: rendered(p, shapes, free, sizes), base)

    source, _, free = fit_sizes([c for c in variants.classes if c.plan is not None], one, joint=joint)
    return _without_trivial_checks(source, problem, variants, free)


Joint = Callable[[list[SizeClass], list[tuple[str, str]], "Fitted", str], bool]


def fit_sizes(free: list[SizeClass], render: Callable[[SizeClass | None, list[SizeClass], list[tuple[str, str]]], str],
              prefix: str = "", joint: Joint | None = None) -> tuple[str, "Fitted", list[SizeClass]]:
    """The base rendering (`render(None, free, sizes)`) with every number that changes in the
    renderings of the free classes (`render(c, free, sizes)`) written as its fitted expression: in
    the kernel as a parameter (`{prefix}size_k`, rendered again with those parameters), after it as
    the expression itself. A class whose rendering fails or does not fit is fixed (dropped from
    `free`) and the fit starts over; so is every class when `joint` (every free class changed at
    once) does not hold. Returns (source, the fit, the classes left free)."""
    sizes: list[tuple[str, str]] = []  # the kernel's size parameters, as the last fit asked
    limit = 2 * len(free) + 4
    for attempt in itertools.count():
        if attempt > limit:  # never expected: the fit does not settle, fix every size
            free, sizes = [], []
        base = render(None, free, sizes)
        others, dropped = {}, None
        for c in free:
            try:
                others[c.name] = render(c, free, sizes)
            except Unrecognized:
                dropped = c
                break
        fitted = _fit(base, others, free) if dropped is None else dropped
        if isinstance(fitted, SizeClass):
            free, sizes = [c for c in free if c is not fitted], []
            continue
        boundary = _boundary(base)
        wanted = list(dict.fromkeys(_expression(*fitted[i]) for i in sorted(fitted) if i < boundary))
        if wanted != [expr for _, expr in sizes]:
            sizes = [(f"{prefix}size_{k}", expr) for k, expr in enumerate(wanted)]
            continue  # render again with the kernel's new parameters
        if free and joint is not None and not joint(free, sizes, fitted, base):
            free, sizes = [], []
            continue
        names = {expr: name for name, expr in sizes}
        source = _substitute(base, {i: names[_expression(*f)] if i < boundary else _expression(*f)
                                    for i, f in fitted.items()})
        return source, fitted, free
    raise AssertionError("unreachable")


def guard_lines(problem: Problem, variants: Variants, shapes: list[tuple[int, ...]],
                free: list[SizeClass]) -> list[str]:
    """forward's first lines: each input's rank and dtype, the free sizes read from the inputs,
    each input's shape (its numbers become the free sizes' names where they are free) and layout,
    the baked attributes."""
    tensors = [i for i in range(len(problem.input_names)) if i not in variants.numbers]
    names = [problem.input_names[i] for i in tensors]
    shapes = [shapes[i] for i in tensors]
    lines = []
    for name in (problem.input_names[i] for i in variants.numbers):  # numbers given to forward
        lines += [f"if type({name}) not in (int, float, bool):",
                  f'    raise ValueError(f"{name} is a {{type({name}).__name__}}; this drafted kernel takes a number")']
    for name, shape, dtype in zip(names, shapes, [variants.dtypes[i] for i in tensors]):
        lines += [f"if {name}.dim() != {len(shape)}:",
                  f'    raise ValueError(f"{name} has {{{name}.dim()}} dims; this drafted kernel takes {len(shape)}")',
                  f"if {name}.dtype != {dtype}:",
                  f'    raise ValueError(f"{name} is {{{name}.dtype}}; this drafted kernel takes {dtype}")']
    for c in free:
        lines.append(f"{c.name} = {c.source}")
    expected = local_name("expected", problem)
    for name, shape in zip(names, shapes):
        lines += [f"{expected} = {tuple(shape)!r}",
                  f"if tuple({name}.shape) != {expected}:",
                  f'    raise ValueError(f"{name} has shape {{tuple({name}.shape)}}; this drafted kernel handles '
                  f'{{{expected}}} (other sizes are fixed by the draft)")']
    for name, contiguous in zip(names, [variants.contiguous[i] for i in tensors]):
        if contiguous:  # the kernel indexes it as traced: a transposed or sliced input is copied first
            lines.append(f"{name} = {name}.contiguous()")
    for fixed in _fixed(variants, free):
        lines += [f"if {fixed.expr} != {fixed.value!r}:",
                  f'    raise ValueError(f"{fixed.expr} is {{{fixed.expr}!r}}; this drafted kernel computes with '
                  f'{fixed.value!r} only")']
    return lines


def _fixed(variants: Variants, free: list[SizeClass]) -> list[Fixed]:
    """The values forward refuses others of: the baked attributes, less a size read at run time from one."""
    read = {c.source for c in free}
    return [f for f in variants.fixed if f.expr not in read]


def notes(problem: Problem, variants: Variants, free: list[SizeClass]) -> list[str]:
    """ModelNew's docstring: what is read at run time and what is fixed."""
    sizes = ", ".join(c.source for c in free) or "none"
    scalars = ", ".join(s.expr for s in variants.scalars) or "none"
    out = [f"Sizes read at run time: {sizes}; other sizes are checked against the draft's.",
           f"Scalars (the module's, and numbers given to forward) passed to the kernel at run time: {scalars}."]
    if fixed := _fixed(variants, free):
        out.append(f"Baked in (forward refuses other values): {', '.join(f.expr for f in fixed)}.")
    return out


def _without_trivial_checks(source: str, problem: Problem, variants: Variants, free: list[SizeClass]) -> str:
    """Drop an input's shape check that only compares each dim with itself (every dim is free)."""
    for name, shape in zip(problem.input_names, variants.shapes):
        by_dim = {c.source: c.name for c in free}
        dims = [by_dim.get(f"{name}.shape[{d}]") for d in range(len(shape))]
        if not dims or None in dims:
            continue
        expected = "(" + ", ".join(dims) + ("," if len(dims) == 1 else "") + ")"
        var = local_name("expected", problem)
        block = re.compile(rf"\n *{var} = {re.escape(expected)}\n *if tuple\({name}\.shape\) != {var}:\n[^\n]*")
        source = block.sub("", source, count=1)
    return source


# --- comparing renderings ------------------------------------------------------------------------


def _tokens(source: str) -> tuple[int, list[tokenize.TokenInfo]]:
    """The code's tokens from the first @triton.jit on: the kernel and ModelNew (not the module
    docstring, whose summary names the problem's sizes, nor its comments)."""
    start = source.find("@triton.jit")
    tokens = [t for t in tokenize.generate_tokens(io.StringIO(source[start:]).readline) if t.type not in SKIPPED]
    return start, tokens


def _boundary(source: str) -> int:
    """The index of the first token of class ModelNew: the kernel's tokens come before."""
    _, tokens = _tokens(source)
    return next(i for i, t in enumerate(tokens) if t.string == "class" and t.start[1] == 0)


def _number(text: str) -> Fraction | float:
    value = float(text) if any(ch in text for ch in ".eE") else int(text, 0)
    return Fraction(value) if isinstance(value, int) else value


Fitted = dict[int, tuple[Fraction | float, dict[str, int]]]  # token index -> (constant, size name -> exponent)


def _fit(base: str, others: dict[str, str], free: list[SizeClass]) -> Fitted | SizeClass:
    """Each number of the kernel and forward that changes with a free class, as a monomial of the
    free sizes; or the class that breaks that (the code differs in more than numbers, or in no
    monomial)."""
    _, tokens = _tokens(base)
    per_class = {}
    for c in free:
        _, theirs = _tokens(others[c.name])
        if len(theirs) != len(tokens) or any(
                (a.type, a.string) != (b.type, b.string) for a, b in zip(tokens, theirs) if a.type != tokenize.NUMBER):
            return c
        per_class[c.name] = theirs
    fitted: Fitted = {}
    for index, token in enumerate(tokens):
        if token.type != tokenize.NUMBER:
            continue
        x0 = _number(token.string)
        exponents: dict[str, int] = {}
        for c in free:
            x1 = _number(per_class[c.name][index].string)
            e = next((e for e in EXPONENTS if _same(x0 * Fraction(c.varied) ** e if isinstance(x0, Fraction)
                                                     else x0 * c.varied ** e,
                                                     x1 * (Fraction(c.value) ** e if isinstance(x1, Fraction)
                                                           else c.value ** e))), None)
            if e is None:
                return c
            if e:
                exponents[c.name] = e
        if not exponents:
            continue
        constant = x0
        for c in free:
            e = exponents.get(c.name, 0)
            constant = constant / (Fraction(c.value) ** e if isinstance(x0, Fraction) else c.value ** e)
        if isinstance(constant, Fraction) and constant.denominator != 1:
            return next(c for c in free if c.name in exponents)  # an integer that is no product of sizes
        if isinstance(constant, Fraction) and all(e < 0 for e in exponents.values()):
            return next(c for c in free if c.name in exponents)  # an integer over sizes alone
        # an integer with sizes below the line (a head dim, embedding // heads): floor division, as
        # forward's own `c // self.n_head`; the joint trace checks it elsewhere
        fitted[index] = (constant, exponents)
    return fitted


def _same(a: Fraction | float, b: Fraction | float) -> bool:
    if isinstance(a, Fraction) and isinstance(b, Fraction):
        return a == b
    return math.isclose(float(a), float(b), rel_tol=1e-9, abs_tol=0.0)


def _expression(constant: Fraction | float, exponents: dict[str, int]) -> str:
    up = [name for name, e in exponents.items() for _ in range(max(e, 0))]
    down = [name for name, e in exponents.items() for _ in range(max(-e, 0))]
    text = str(int(constant)) if isinstance(constant, Fraction) else repr(constant)
    factors = [] if constant == 1 and up else [text]
    text = " * ".join(factors + up)
    divide = " // " if isinstance(constant, Fraction) else " / "  # an integer stays one
    return text + (f"{divide}({' * '.join(down)})" if down else "")


def _evaluate(constant: Fraction | float, exponents: dict[str, int], sizes: dict[str, int]) -> Fraction | float:
    value = constant
    for name, e in exponents.items():
        value = value * (Fraction(sizes[name]) ** e if isinstance(constant, Fraction) else sizes[name] ** e)
    return value


def _joint_holds(variants: Variants, free: list[SizeClass], fitted: Fitted, rendered, base: str) -> bool:
    """The plan traced with every free class changed at once renders to the same kernel, and forward
    to the numbers the fitted expressions give there."""
    traced = variants.joint(tuple(free))
    if traced is None:
        return False
    plan, shapes = traced
    try:
        other = rendered(plan, shapes)
    except Unrecognized:
        return False
    _, tokens = _tokens(base)
    _, theirs = _tokens(other)
    if len(tokens) != len(theirs):
        return False
    sizes = {c.name: c.varied for c in free}
    for index, (a, b) in enumerate(zip(tokens, theirs)):
        if a.type != tokenize.NUMBER:
            if (a.type, a.string) != (b.type, b.string):
                return False
            continue
        expected = _evaluate(*fitted[index], sizes) if index in fitted else _number(a.string)
        if not _same(expected, _number(b.string)):
            return False
    return True


def _substitute(source: str, replacements: dict[int, str]) -> str:
    """The problem's rendering with each fitted number replaced: by its kernel parameter in the
    kernel, by its expression in forward."""
    start, tokens = _tokens(source)
    body = source[start:]
    line_starts = [0]
    for line in body.splitlines(keepends=True):
        line_starts.append(line_starts[-1] + len(line))
    for index in sorted(replacements, reverse=True):
        token = tokens[index]
        text = replacements[index]
        before = tokens[index - 1].string if index else ","
        after = tokens[index + 1].string if index + 1 < len(tokens) else ","
        if (" " in text) and not (before in PUNCTUATION and after in PUNCTUATION):
            text = f"({text})"
        a = line_starts[token.start[0] - 1] + token.start[1]
        b = line_starts[token.end[0] - 1] + token.end[1]
        body = body[:a] + text + body[b:]
    return source[:start] + body
