"""The evaluator's checks on one trial's outputs (which check failed, and the verdict it calls for).

A trial fails when an output shares memory with an input (aliasing), or when the candidate's
outputs, or its inputs after forward(), differ from the reference's (mismatch); each returns
(check, verdict, message) for tools/verdict.py. nonfinite() tells whether a reference output
holds NaN or infinity (the shifted input distribution is dropped for problems where it does).
"""
from __future__ import annotations

from typing import Any

from tools.compare import Stats, Tolerance, compare_trees
from tools.record import Verdict
from tools.transport import tensor_nodes


def mismatch(ref: Any, cand: Any, stats: Stats, tolerances: dict[str, Tolerance] | None, path: str,
             what: str = "") -> tuple[str, Verdict, str] | None:
    found = compare_trees(ref, cand, stats, tolerances, path)
    if found is None:
        return None
    verdict = Verdict.REJECTED if found.check == "output-type" and path == "output" else Verdict.INCORRECT
    label = f"inputs-unchanged:{found.check}" if what else found.check
    prefix = "the inputs after forward() differ from the reference's (a kernel wrote into its inputs): " if what else ""
    return label, verdict, prefix + found.message


def aliasing(tree: dict[str, Any]) -> tuple[str, Verdict, str] | None:
    """An output that shares memory with an input (as the worker saw its storages)."""
    items = tree.get("items") if isinstance(tree, dict) else None
    if not isinstance(items, list) or len(items) != 2:
        return None
    inputs = [n.get("ptr") for n in tensor_nodes(items[1]) if n.get("ptr")]
    for node in tensor_nodes(items[0]):
        ptr = node.get("ptr")
        if not ptr or not ptr[1]:
            continue
        for other in inputs:
            if other[1] and ptr[0] < other[0] + other[1] and other[0] < ptr[0] + ptr[1]:
                return "output-alias", Verdict.REJECTED, "an output shares memory with an input; return a new tensor"
    return None


def nonfinite(tree: Any) -> bool:
    import torch

    if isinstance(tree, torch.Tensor):
        return bool(tree.is_floating_point() and not torch.isfinite(tree).all())
    if isinstance(tree, (list, tuple)):
        return any(nonfinite(x) for x in tree)
    return False
