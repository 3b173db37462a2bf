"""A batch on the CPU runs a suite written with a size switch at its small size.

The bundled suite (suite/) sizes its problems for a GPU; each file reads `SUITE_SCALE` at import
and `SUITE_SCALE=small` shrinks it to a few thousand elements. At the GPU sizes every attempt
times out in Triton's interpreter, so a CPU batch of such a suite is scaled down, with one line
saying so, unless the user set `SUITE_SCALE` (any value other than `small` keeps the full sizes).
A suite whose files never mention the switch (a KernelBench folder) runs as it is.

We scale down rather than refuse: a CPU batch checks correctness only (nothing is timed there),
which the small sizes test just as well, and it is how CI runs the suite.
"""
from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path

SCALE_VAR = "SUITE_SCALE"
SMALL = "small"


def reads_scale(problem: Path) -> bool:
    """Whether a problem file has the size switch (it names SUITE_SCALE)."""
    try:
        return SCALE_VAR in problem.read_text(errors="replace")
    except OSError:
        return False


def cpu_scale(problems: Iterable[Path], env: Mapping[str, str]) -> dict[str, str]:
    """The variables a CPU batch's workers get: SUITE_SCALE=small where the suite has the switch and
    the user did not choose a scale; else nothing."""
    if SCALE_VAR in env or not any(reads_scale(p) for p in problems):
        return {}
    return {SCALE_VAR: SMALL}


def scale_line(suite: Path, command: str = "batch") -> str:
    return (f"{command}: no GPU: running {suite} at {SCALE_VAR}={SMALL} (its default sizes are meant for a GPU and time "
            f"out in Triton's interpreter; set {SCALE_VAR} to choose: any other value keeps the full sizes)")
