"""The evaluator's checks on one trial's outputs (which check failed, and the verdict it calls for).

A trial fails when an output shares memory with an input (aliasing), or when the candidate's
outputs, or its inputs after forward(), differ from the reference's (mismatch); each returns
(check, verdict, message) for tools/judge/verdict.py. compare_reply() runs that sequence on a worker's
reply to a trial request, for the correctness trials (tools/judge/trials.py) and the held-out ones
(tools/judge/heldout.py) alike; each phrases its own failure message. nonfinite() tells whether a
reference output holds NaN or infinity (the shifted input distribution is dropped for problems
where it does). calls_mismatch() checks the outputs of a run of calls (timed blocks,
tools/timing/blocks.py; back-to-back passes, tools/timing/clocks.py) one by one against the reference's.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from tools.judge.compare import Stats, Tolerance, compare_trees
from tools.judge.exact import POOL_BELOW, STRESS, ExactJudge
from tools.judge.exact_rows import RowSample
from tools.judge.verdict import Failure
from tools.record import Verdict
from tools.wire.transport import TransportError, tensor_nodes

if TYPE_CHECKING:
    from tools.processes.process import WorkerProcess

Problem = tuple[str, Verdict, str]  # (check, verdict, message): the first check a trial failed


@dataclass(frozen=True)
class Compared:
    """What compare_reply() found in a trial's reply."""

    failure: Failure | None = None  # the reply's outputs were malformed (rejected): the worker's doing
    problem: Problem | None = None  # the first failed check, for the caller to phrase; None: all passed


def compare_reply(worker: "WorkerProcess", header: dict[str, Any], payload: bytes, ref_out: Any, ref_in: Any,
                  stats: Stats, tolerances: dict[str, Tolerance] | None, name: str,
                  fed: dict[str, Any] | None = None, exact: tuple[ExactJudge, str, Any] | None = None) -> Compared:
    """A trial's reply against the reference: the candidate's outputs read from it (malformed:
    check `name` fails, rejected), then no output aliasing an input, outputs equal to `ref_out`
    (error sizes added to `stats`), inputs after forward() equal to `ref_in`. On a GPU the inputs
    after forward() are read where the parent wrote them (`fed`, the tree of the set written into
    the worker's input arena): the worker names them without copying them (tools/wire/transport.py,
    `hold`), which keeps a whole input set out of its arena; on the CPU they come in the reply.
    With `exact` = (judge, key, the reference's float64 outputs), outputs within the tolerance are
    then held to the float64-judged bound (tools/judge/exact.py; check `float64-bound`)."""
    try:
        cand_out, cand_in = _candidate_values(worker, header, payload, fed)
        aliased = aliasing(header["tree"])  # reads the worker's storage claims: malformed ones are its doing
    except (TransportError, KeyError, TypeError, ValueError) as exc:
        return Compared(failure=Failure(Verdict.REJECTED, name, f"malformed output: {exc}",
                                        f"The worker sent malformed outputs ({exc})."))
    # a stress trial judged against float64: eager float32 is the yardstick there, not the truth (on
    # inputs scaled 1000x, an attention's softmax is an argmax whose near-ties eager breaks its own way)
    values_from = POOL_BELOW if exact is not None and exact[1] == STRESS else None
    problem = (aliased or mismatch(ref_out, cand_out, stats, tolerances, "output", values_from=values_from)
               or mismatch(ref_in, cand_in, Stats(), tolerances, "input", what="inputs after forward"))
    if problem is None and exact is not None:
        judge, key, wide = exact
        why = (wide.observe(judge, key, ref_out, cand_out) if isinstance(wide, RowSample)  # rows, drawn now
               else judge.observe(key, wide, ref_out, cand_out))
        if why is not None:
            problem = ("float64-bound", Verdict.INCORRECT, why)
    del cand_out, cand_in  # CUDA ones are views into the worker's arena; it frees its side at its next request
    return Compared(problem=problem)


def _candidate_values(worker: "WorkerProcess", header: dict[str, Any], payload: bytes,
                      fed: dict[str, Any] | None) -> tuple[Any, Any]:
    """(outputs, inputs after forward) of a trial's reply: see compare_reply()."""
    from tools.wire.transport import decode

    if fed is None or not worker.cuda:
        cand_out, cand_in = worker.outputs(header, payload)
        return cand_out, cand_in
    tree = header.get("tree")
    items = tree.get("items") if isinstance(tree, dict) and tree.get("t") == "list" else None
    if not isinstance(items, list) or len(items) != 2:
        raise TransportError("a trial's reply is not [outputs, inputs]")
    return decode(items[0], payload, worker.map_arena(header)), decode(fed, b"", worker.input_arena)


def mismatch(ref: Any, cand: Any, stats: Stats, tolerances: dict[str, Tolerance] | None, path: str,
             what: str = "", values_from: int | None = None) -> Problem | None:
    found = compare_trees(ref, cand, stats, tolerances, path, values_from=values_from)
    if found is None:
        return None
    verdict = Verdict.REJECTED if found.check == "output-type" and path == "output" else Verdict.INCORRECT
    label = f"inputs-unchanged:{found.check}" if what else found.check
    prefix = "the inputs after forward() differ from the reference's (a kernel wrote into its inputs): " if what else ""
    return label, verdict, prefix + found.message


def aliasing(tree: dict[str, Any]) -> Problem | None:
    """An output that shares memory with an input (as the worker saw its storages). A storage
    claim that is not [address, bytes] of two non-negative integers raises TransportError: the
    reply is malformed, the candidate's doing (compare_reply), never a fault of the parent."""
    items = tree.get("items") if isinstance(tree, dict) else None
    if not isinstance(items, list) or len(items) != 2:
        return None
    inputs = [_storage(n) for n in tensor_nodes(items[1]) if n.get("ptr")]
    for node in tensor_nodes(items[0]):
        ptr = _storage(node) if node.get("ptr") else None
        if not ptr or not ptr[1]:
            continue
        for other in inputs:
            if other[1] and ptr[0] < other[0] + other[1] and other[0] < ptr[0] + ptr[1]:
                return "output-alias", Verdict.REJECTED, "an output shares memory with an input; return a new tensor"
    return None


def _storage(node: dict[str, Any]) -> tuple[int, int]:
    """A tensor node's storage claim, (address, bytes), checked."""
    ptr = node.get("ptr")
    if (not isinstance(ptr, list) or len(ptr) != 2
            or not all(isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in ptr)):
        raise TransportError(f"a tensor's storage is {str(ptr)[:60]}, not [address, bytes]")
    return ptr[0], ptr[1]


NONFINITE_CHUNK = 1 << 26  # elements per pass of nonfinite(): its temporaries stay a few hundred MB


def nonfinite(tree: Any) -> bool:
    """Whether a floating tensor of `tree` holds NaN or infinity. In chunks, reduced on the device
    and read once: on a whole 8 GiB output, torch.isfinite's temporaries took 8 GiB of the parent's
    memory (measured on an H100, benchmarks/eval_memory.py --trace)."""
    import torch

    if isinstance(tree, torch.Tensor):
        if not tree.is_floating_point() or tree.numel() == 0:
            return False
        if tree.dim() == 0:
            return not bool(torch.isfinite(tree))
        rows = max(1, NONFINITE_CHUNK // max(1, tree[0].numel()))  # along dim 0: no copy of a permuted view
        return not bool(torch.stack([torch.isfinite(part).all() for part in tree.split(rows)]).all())
    if isinstance(tree, (list, tuple)):
        return any(nonfinite(x) for x in tree)
    return False


def calls_mismatch(refs: list[Any], outs: Any, tolerances: dict[str, Tolerance] | None, first: int,
                   what: str) -> Problem | None:
    """The outputs of a run of calls against the reference's on the same inputs, one by one:
    ("count", rejected, ...) when the worker did not answer every call with an output (a shorter
    list would leave calls unchecked), ("values", incorrect, ...) for the first that differs."""
    if not isinstance(outs, list) or len(outs) != len(refs):
        count = len(outs) if isinstance(outs, list) else type(outs).__name__
        return "count", Verdict.REJECTED, f"the candidate's worker answered {len(refs)} {what} calls with outputs {count}"
    for i, (ref, out) in enumerate(zip(refs, outs)):
        found = compare_trees(ref, out, Stats(), tolerances)
        if found:
            return ("values", Verdict.INCORRECT, f"{what} call {first + i + 1} returned a different result from the "
                    f"reference (a kernel must do the full work on every call): {found.message}")
    return None
