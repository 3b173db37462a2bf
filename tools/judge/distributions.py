"""The input distributions a problem's correctness trials rotate over, and those it does not allow.

Four rotate over the trials (tools/worker/inputs.py makes them): the problem's own, a shifted one
(wider, off-centre), a signed one (centred on zero: both signs of every continuous input), and a
stress one (scaled up by the largest factor, up to 1000, under which the reference stays finite,
and moved far off centre: what unstabilised softmax, log-sum-exp and variances do not survive). A
distribution under which the reference's output stops being finite where it was finite on the
problem's own inputs is not what the problem allows: "shifted" is then dropped; "signed" keeps
the inputs that can cross zero (each tried alone, then together) and leaves the others as the
problem made them, or is dropped when none can. What was dropped, and why, is in the record
(`Result.dropped`); the distribution of every trial too (`Result.distributions`).

Decided on first use and kept for the evaluator's life, under the lock of its reference worker
(the caller's): the reference's outputs it reads may be views into that worker's arena.
"""
from __future__ import annotations

from collections.abc import Callable
from typing import Any

from tools.judge.trial_checks import nonfinite
from tools.processes.reference import MEMORY_ERRORS
from tools.problem import ProblemError

ROTATION = ("problem", "shifted", "signed", "stress")
STRESS_FACTORS = (1000, 100, 10)  # tried largest first: the first is the cap (tools/worker/inputs.py, "stress:F")
# (seed, distribution) -> [outputs, inputs after forward] of the reference, possibly read in place
Outputs = Callable[[int, str], Any]


class Distributions:
    def __init__(self, described_inputs: list[dict[str, Any]]) -> None:
        self.names = list(ROTATION)  # the rotation; "signed" becomes "signed:N,M" once chosen
        self.dropped: dict[str, str] = {}  # a distribution this problem does not allow: why
        self._inputs = described_inputs

    def for_trial(self, i: int, seed: int, outputs: Outputs) -> str:
        """The distribution of trial i: the rotation's next one still allowed for this problem."""
        while True:
            dist = self.names[i % len(self.names)]
            if dist == "shifted" and _breaks(outputs, seed, "shifted"):
                self._drop("shifted", "the reference's output is not finite (or it raises) on shifted inputs")
            elif dist == "signed":
                self._choose_signed(seed, outputs)  # replaced by the inputs that may cross zero, or dropped
            elif dist == "stress":
                self._choose_stress(seed, outputs)  # replaced by the largest factor allowed, or dropped
            else:
                return dist

    def _choose_stress(self, seed: int, outputs: Outputs) -> None:
        """Replace "stress" in the rotation by "stress:F", F the largest of STRESS_FACTORS under which
        the reference's output stays finite; drop it when there is none."""
        at = self.names.index("stress")
        for factor in STRESS_FACTORS:
            if not _breaks(outputs, seed, f"stress:{factor}"):
                self.names[at] = f"stress:{factor}"
                return
        self._drop("stress", f"the reference's output is not finite (or it raises) on inputs scaled up "
                             f"{STRESS_FACTORS[-1]}x and moved off centre")

    def _choose_signed(self, seed: int, outputs: Outputs) -> None:
        """Replace "signed" in the rotation by the inputs that may cross zero: all, some, or none."""
        at = self.names.index("signed")
        leaves = floating_leaves(self._inputs)
        if not leaves:
            self._drop("signed", "the problem has no floating inputs")
            return
        keep = (leaves if not _breaks(outputs, seed, _signed(leaves))
                else [n for n in leaves if not _breaks(outputs, seed, _signed([n]))])
        if len(keep) > 1 and keep != leaves and _breaks(outputs, seed, _signed(keep)):
            keep = keep[:1]  # each may cross zero alone, not together: the first
        lost = [n for n in leaves if n not in keep]
        if not keep:
            self._drop("signed", f"the reference's output is not finite (or it raises) when input {_names(lost)} cross zero")
            return
        self.names[at] = _signed(keep)
        if lost:
            self.dropped["signed"] = (f"input {_names(lost)} keep the problem's own signs: the reference's output is not "
                                      f"finite (or it raises) when they cross zero")

    def _drop(self, dist: str, why: str) -> None:
        self.names.remove(dist)
        self.dropped[dist] = why


def _breaks(outputs: Outputs, seed: int, dist: str) -> bool:
    """The reference stops being finite under `dist` (or refuses its inputs: binary_cross_entropy
    of values outside [0, 1]) where it is finite on the problem's own inputs."""
    try:
        out, _ = outputs(seed, dist)
    except ProblemError as exc:  # the reference raised on these inputs; on its own ones it must not
        if MEMORY_ERRORS.search(str(exc)):  # the device's memory, taken by another process, not these inputs:
            return False  # the distribution stays (dropped, it would weaken every trial of this evaluator)
        outputs(seed, "problem")
        return True
    if not nonfinite(out):
        return False
    del out
    base, _ = outputs(seed, "problem")
    return not nonfinite(base)


def words(dist: str) -> str:
    """A trial's distribution as the model and the user read it in a failure message."""
    kind, _, leaves = dist.partition(":")
    if kind == "signed":
        return f"signed inputs: input {_names([int(n) for n in leaves.split(',')])} drawn around zero, both signs"
    if kind == "stress":
        return (f"stress inputs: scaled up {leaves}x and moved 16 standard deviations off centre (softmax and "
                "log-sum-exp need the row maximum subtracted, variances a stable formula)")
    return {"problem": "problem inputs", "shifted": "shifted inputs: wider and off-centre"}.get(kind, f"{dist} inputs")


def _signed(leaves: list[int]) -> str:
    return "signed:" + ",".join(map(str, leaves))


def _names(leaves: list[int]) -> str:
    return ", ".join(f"#{n}" for n in leaves)


def floating_leaves(described: list[dict[str, Any]]) -> list[int]:
    """The numbers of the floating tensor leaves, depth-first, in get_inputs()'s description
    (tools/worker/inputs.py describe(); the numbering of "signed:N")."""
    found: list[int] = []
    count = 0

    def walk(items: list[dict[str, Any]]) -> None:
        nonlocal count
        for d in items:
            if d.get("kind") == "tensor":
                if d.get("dtype", "").startswith(("float", "bfloat")):
                    found.append(count)
                count += 1
            elif d.get("kind") in ("list", "tuple"):
                walk(d.get("items", []))

    walk(described)
    return found
