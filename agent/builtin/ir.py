"""The IR recognition produces and drafting consumes: a list of nodes in topological order over
"leaves" (forward inputs and parameters, each with the glue ops - views, transposes, expands -
applied to it before use), and the plan that picks a kernel template for them.

A node is elementwise (`ew`), a reduction over trailing or middle dims (`reduce`: sum, max, min),
or a matrix product (`mm`: 2-d or batched); or one of the window ops (agent.builtin.window_lower):
a pooling (`pool`), a scan along a dim (`scan`), an arg-reduction (`argreduce`), and the index
changes around a scan (`flip`, `pad`, `slice`, `const`). A node's args are refs - ("leaf", i) or
("node", j) - or Python scalars.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from agent.builtin.variants import Variants

FLOAT_DTYPES = ("torch.float32", "torch.float16", "torch.bfloat16", "torch.float64")
LEAF_DTYPES = FLOAT_DTYPES + ("torch.bool",)  # a bool input (a mask) is read as 0.0 / 1.0


class Unrecognized(Exception):
    """The forward holds something the built-in policy has no template for; str() says what."""


class KeptEager(Unrecognized):
    """No family claims the forward and it has no elementwise work either (agent.builtin.fallback):
    a draft could only call torch, which the evaluator rejects, so the reference stays the answer."""


class NoTemplate(Unrecognized):
    """An aten op that no lowering knows (`op`: `aten.sort.default`). The walk goes on past it, so
    that the one line names every such op of the forward, not only the first."""

    def __init__(self, op: str) -> None:
        super().__init__(f"{op} has no built-in template")
        self.op = op


def no_template(ops: list[str]) -> Unrecognized:
    """The one line for the ops without a template, each named once, in the forward's order."""
    names = list(dict.fromkeys(ops))
    if len(names) == 1:
        return NoTemplate(names[0])
    listed = ", ".join(names[:-1]) + f" and {names[-1]}"
    return Unrecognized(f"{listed} have no built-in template")


class Runtime(float):
    """A scalar of the forward that comes from the module (a constructor argument stored on
    `self`): its traced value, and the kernel parameter it reaches the kernel as, so the kernel
    never bakes it in (agent.builtin.variants finds them)."""

    name: str

    def __new__(cls, value: float, name: str) -> "Runtime":
        obj = super().__new__(cls, value)
        obj.name = name
        return obj

    def __reduce__(self):
        return (Runtime, (float(self), self.name))


@dataclass
class Leaf:
    """A forward input (`input`, its position) or a parameter/buffer (`param`, its dotted name),
    with the glue ops applied to it, and the resulting tensor's shape and strides (elements)."""

    kind: str
    ref: Any
    glue: list[tuple[str, list[Any]]]
    shape: tuple[int, ...]
    strides: tuple[int, ...]
    dtype: str


@dataclass
class Node:
    op: str  # ew | reduce | mm | pool | scan | argreduce | flip | pad | slice | const
    name: str  # ew: the op (add, relu...); reduce: sum | max | min; mm: mm | bmm; pool: max | avg;
    # scan: sum | prod; argreduce: argmax | argmin
    args: list[Any]  # ("leaf", i) | ("node", j) | python scalars
    shape: tuple[int, ...]
    dtype: str
    attrs: dict[str, Any] = field(default_factory=dict)


@dataclass
class Plan:
    kind: str  # pointwise | rowwise | colwise | matmul | gemv | mm_reduce | twolevel | pool | scan | argreduce
    leaves: list[Leaf]
    nodes: list[Node]
    out: int  # the node holding the output (before out_glue)
    out_glue: list[tuple[str, list[Any]]]
    out_shape: tuple[int, ...]
    out_dtype: str
    # rowwise / colwise / twolevel: the full shape reduced and the reduced dims (a contiguous block; twolevel: the rows)
    full_shape: tuple[int, ...] = ()
    red_dims: tuple[int, ...] = ()
    summary: str = ""
    precision: str = "fp32"  # the run's (tools/precision.py): which tl.dot precisions a float32 product may use

    @property
    def patterns(self) -> list[str]:
        return sorted({n.attrs.get("pattern") for n in self.nodes if n.attrs.get("pattern")})


@dataclass
class Problem:
    """What the draft needs from the problem file besides the plan."""

    path: Path
    entry: str
    source: str
    init_source: str  # ModelNew.__init__ (the reference's, renamed), indented for the class body
    prelude: str  # imports and module-level definitions __init__ needs
    forward_params: str  # the forward's parameter list after self
    input_names: list[str]
    param_exprs: dict[str, str]  # parameter name -> expression on self
    # what a user may vary (agent.builtin.variants): set by recognition, read by the draft
    variants: Variants | None = None
    # each submodule of the model: expression on self -> (class name, its plain attributes), so a
    # draft can read a module's settings at run time (a pooling module's kernel size, stride...)
    submodules: dict[str, tuple[str, dict[str, Any]]] = field(default_factory=dict)
    # why a family's plan could not be drafted: then every trace of the problem (at other sizes too)
    # is the fallback's (agent.builtin.fallback), set by recognition
    fallback: str | None = None
