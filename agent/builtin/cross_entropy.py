"""Cross-entropy of logits against class indices (`F.cross_entropy`, `nn.CrossEntropyLoss`, and
`F.nll_loss` of a `log_softmax`): the `cross_entropy` plan kind, recognized on the traced graph
and drafted as one Triton kernel over the rows (kernels/cross_entropy.py.j2).

Both forms trace to `_log_softmax(x, 1)` followed by `nll_loss_forward(., t, weight, reduction,
ignore_index)`. The kernel reads each row of logits once in blocks of classes with a running
maximum and sum of exponentials (log-sum-exp), picks the target's logit, and writes the row's
loss (`reduction='none'`) or a partial sum and count per program that a second one-program kernel
adds up in a fixed order (`sum`; `mean` divides by the rows not ignored, 0 / 0 when all are, as
torch). Every size is read at run time. A target outside [0, classes) gives NaN for its row (torch
raises a device-side assertion; the kernel does not read out of bounds).

Declined with a reason: class weights, label smoothing (torch traces it to other ops), logits of
other than two dims (nll_loss2d), and any other work in the forward.
"""
from __future__ import annotations

from typing import Any

from agent.builtin.ir import FLOAT_DTYPES, Leaf, Node, Plan, Problem, Unrecognized
from agent.builtin.load import op_name, placeholder_sources
from agent.builtin.registry import Family, register
from agent.builtin.configs import pow2
from agent.builtin.templates import Context, common_variables
from agent.builtin.templates import render as render_template

REDUCTIONS = {0: "none", 1: "mean", 2: "sum"}
PASSING = {"getitem", "alias", "detach"}  # what may stand between the loss and the output


def _name(node: Any) -> str:
    return op_name(node.target)


def match(traced: Any) -> Plan | None:
    """The `cross_entropy` plan of a traced forward; None when it has no nll_loss; Unrecognized
    (one line) when it has one this kernel does not compute."""
    graph = traced[0]
    calls = [n for n in graph.graph.nodes if n.op == "call_function"]
    losses = [n for n in calls if _name(n) == "nll_loss_forward"]
    if not losses:
        return None
    if len(losses) > 1:
        raise Unrecognized(f"{len(losses)} nll_loss ops in one forward; the kernel computes one loss")
    loss = losses[0]
    probs, target, weight, reduction, ignore_index = (list(loss.args) + [None, 1, -100])[:5]
    if weight is not None:
        raise Unrecognized("cross-entropy with class weights (the kernel weighs every class alike)")
    if int(reduction) not in REDUCTIONS:
        raise Unrecognized(f"nll_loss with reduction {reduction}")
    if not (probs.op == "call_function" and _name(probs) == "_log_softmax"):
        raise Unrecognized("nll_loss of something other than a log_softmax (the kernel computes both)")
    logits = probs.args[0]
    shape = tuple(int(s) for s in logits.meta["val"].shape)
    if len(shape) != 2 or int(probs.args[1]) not in (1, -1):
        raise Unrecognized(f"cross-entropy over logits of shape {list(shape)} along dim {probs.args[1]} "
                           "(the kernel takes [rows, classes], classes last)")
    other = [n for n in calls if n not in (loss, probs) and not (_name(n) in PASSING and _reaches_only(n, loss))]
    if other:
        raise Unrecognized(f"aten.{_name(other[0])} beside the cross-entropy (the kernel computes the loss alone)")
    sources = placeholder_sources(traced)
    if logits not in sources or target not in sources:
        raise Unrecognized("cross-entropy of a computed value (the kernel reads the logits and targets as given)")
    x, t = logits.meta["val"], target.meta["val"]
    dtype = str(x.dtype)
    if dtype not in FLOAT_DTYPES or dtype == "torch.float64":
        raise Unrecognized(f"cross-entropy over {dtype} logits")
    if str(t.dtype) != "torch.int64" or tuple(t.shape) != shape[:1]:
        raise Unrecognized(f"targets of {t.dtype} and shape {list(t.shape)} (class indices, int64, one per row)")
    leaves = [Leaf(*sources[logits], [], shape, tuple(int(s) for s in x.stride()), dtype),
              Leaf(*sources[target], [], shape[:1], tuple(int(s) for s in t.stride()), "torch.int64")]
    kind = REDUCTIONS[int(reduction)]
    out_shape = shape[:1] if kind == "none" else ()
    node = Node("cross_entropy", "cross_entropy", [("leaf", 0), ("leaf", 1)], out_shape, dtype,
                attrs={"reduction": kind, "ignore_index": int(ignore_index), "pattern": "cross_entropy"})
    summary = (f"cross-entropy ({kind}) of {shape[0]}x{shape[1]} {dtype.removeprefix('torch.')} logits against class "
               f"indices, ignore_index {int(ignore_index)}")
    return Plan(kind="cross_entropy", leaves=leaves, nodes=[node], out=0, out_glue=[], out_shape=out_shape,
                out_dtype=dtype, full_shape=shape, red_dims=(1,), summary=summary)


def _reaches_only(node: Any, loss: Any) -> bool:
    """A getitem or alias whose input is the loss (or one of those): glue on the output."""
    source = node.args[0] if node.args else None
    while source is not None and source is not loss and getattr(source, "op", None) == "call_function" \
            and _name(source) in PASSING:
        source = source.args[0]
    return source is loss


def render(plan: Plan, problem: Problem, config: dict[str, Any], ctx: Context) -> str:
    node = plan.nodes[plan.out]
    variables = common_variables(plan, problem, config, ctx)
    reduction = node.attrs["reduction"]
    variables["out_alloc"] = "(in0.shape[0],)" if reduction == "none" else "()"
    variables["offset_limit"] = None  # rows and the target's class are offset in int64
    return render_template("cross_entropy.py.j2", reduction=reduction, ignore_index=node.attrs["ignore_index"],
                           **variables)


def space(plan: Plan) -> list[dict[str, Any]]:
    """Rows per program and classes per block: narrow rows (up to 1024 classes) in one block, many
    rows to a program; wide ones one row to a program in blocks of 1024 to 4096 classes, 2048 with
    4 warps first (on an H200, 16384 x 4096 and 8192 x 32000: 1.65x and 2.74x eager, against 1.28x
    and 2.31x for 4096 with 8 warps)."""
    classes = plan.full_shape[1]
    width = max(16, pow2(classes))
    if width <= 1024:
        rows = max(1, 4096 // width)
        return [{"BLOCK_R": rows, "BLOCK_C": width, "num_warps": 4},
                {"BLOCK_R": max(1, rows // 4), "BLOCK_C": width, "num_warps": 4},
                {"BLOCK_R": rows * 2, "BLOCK_C": width, "num_warps": 8}]
    return [{"BLOCK_R": 1, "BLOCK_C": min(width, 2048), "num_warps": 4},
            {"BLOCK_R": 1, "BLOCK_C": min(width, 4096), "num_warps": 8},
            {"BLOCK_R": 2, "BLOCK_C": min(width, 2048), "num_warps": 8},
            {"BLOCK_R": 1, "BLOCK_C": 1024, "num_warps": 4}]


FAMILY = register(Family(kind="cross_entropy", render=render, space=space, match=match))
