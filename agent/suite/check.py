"""Suite curation: find problems that cannot tell a good kernel from a bad one.

`check_suite(DIR)` looks at every problem file under DIR (`*.py` defining the entry class,
`get_inputs` and `get_init_inputs`; files defining none of them are skipped) and flags:

- degenerate outputs, from the reference's outputs on several draws of inputs (secret-free
  fixed seeds), computed by the evaluator's reference worker: problem code never runs in this
  process. Per output:
  `constant-output` every element is the same value on every draw (e.g. `x * 0`);
  `input-independent` the output does not change when the inputs are re-drawn;
  `identity` the output equals one of the inputs (the op is trivial on these inputs, e.g. ReLU
  of non-negative values, clamp inside its range);
  `mostly-constant` (warning) at least 99% of the elements hold one value (e.g. ReLU of mostly
  negative values);
  `non-finite` (warning) NaN or Inf in the reference's outputs;
  `constant-inputs` (warning) `get_inputs()` gives the same values whatever the seed.
  The degenerate kinds are errors when they hold on both input distributions the evaluator
  uses (the problem's own, the shifted one and the signed one as the evaluator chooses it for this
  problem, tools/judge/trials.py), warnings when not on all of them (the other trials still test a
  candidate: ReLU of `torch.rand` is an identity on its own and shifted inputs, not on signed ones).
- `too-fast`: on a GPU, the eager reference's median time (timed by the reference worker with
  the evaluator's timing protocol) below `min_eager_ms` (default 0.02 ms: launch overhead and
  timer resolution dominate, so speedups are noise). On the CPU this cannot be judged; the
  report says so (`timing-unjudged`, info) with the least bytes moved and flops.
- `duplicate` / `near-duplicate`: pairs of problems whose code, normalized (docstrings and
  comments dropped, local names renamed canonically), is identical, identical up to numeric
  constants (sizes, hyper-parameters), or uses the same operations (calls and operators) in a
  computation (imports and input makers aside, constants masked) at least `similarity` alike
  (default 0.9, difflib ratio over tokens). Duplicates are errors, the others warnings.
- `invalid`: a problem file that is broken: it does not parse or read, defines only part of the
  contract (the entry class, `get_inputs`, `get_init_inputs`), or its reference does not load or
  run. A file that defines none of the three is a helper module: skipped (info).

Severity "info" never counts as a problem with the suite; `ratchet suite check` exits 1 when
any error or warning was found.

This module probes problems and turns findings into flags; what the reference's outputs say is
agent/suite/degenerate.py, the code comparison agent/suite/duplicates.py.
"""
from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from agent.suite.degenerate import degenerate_kinds
from agent.suite.duplicates import DEFAULT_SIMILARITY, near_duplicates

PROBE_SEEDS = (0x5EED01, 0x5EED02, 0x5EED03)  # fixed: curation needs reproducible draws, not secrecy
DEFAULT_MIN_EAGER_MS = 0.02


@dataclass
class Flag:
    kind: str
    severity: str  # "error", "warning" or "info"
    detail: str

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class ProblemReport:
    path: str
    name: str
    status: str = "checked"  # "checked", "invalid" or "skipped" (not a problem file)
    flags: list[Flag] = field(default_factory=list)
    eager_ms: float | None = None
    bytes_moved: int | None = None
    flops: int | None = None
    device: str | None = None

    @property
    def flagged(self) -> bool:
        return any(f.severity in ("error", "warning") for f in self.flags)

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["flagged"] = self.flagged
        return data


@dataclass
class SuiteReport:
    directory: str
    problems: list[ProblemReport]

    @property
    def flagged(self) -> list[ProblemReport]:
        return [p for p in self.problems if p.flagged]

    def to_dict(self) -> dict[str, Any]:
        return {"directory": self.directory, "problems": [p.to_dict() for p in self.problems],
                "flagged": [p.name for p in self.flagged]}


# --- the suite -------------------------------------------------------------------------------------


def problem_files(directory: Path, entry: str = "Model") -> tuple[list[Path], list[ProblemReport]]:
    """Files under `directory` that are problems; the rest as reports: broken problem files
    (`invalid`, an error) and helper modules (`skipped`, info), see `contract_problem`."""
    found, others = [], []
    for path in sorted(directory.rglob("*.py")):
        if path.name == "__init__.py" or any(part.startswith(".") or part == "__pycache__" for part in path.parts):
            continue
        why, broken = contract_problem(path, entry)
        if why is None:
            found.append(path)
        elif broken:
            others.append(ProblemReport(str(path), _name(directory, path), status="invalid",
                                        flags=[Flag("invalid", "error", why)]))
        else:
            others.append(ProblemReport(str(path), _name(directory, path), status="skipped",
                                        flags=[Flag("not-a-problem", "info", why)]))
    return found, others


def contract_problem(path: Path, entry: str = "Model") -> tuple[str | None, bool]:
    """(None, False) for a file that keeps the problem contract (the entry class, get_inputs,
    get_init_inputs); else why not, and whether that makes it a broken problem file: one that does
    not parse or read, or defines part of the contract. A file that defines none of it is a helper
    module, not a problem."""
    import ast

    from tools.problem import top_level_names

    try:
        tree = ast.parse(path.read_text(), filename=str(path))
    except SyntaxError as exc:
        return f"{path.name}: syntax error at line {exc.lineno}: {exc.msg}", True
    except (OSError, UnicodeDecodeError) as exc:
        return f"{path.name}: cannot read it ({exc.strerror if isinstance(exc, OSError) else exc})", True
    names = top_level_names(tree)
    functions = names["def"] | names["assign"]
    present = {entry: entry in names["class"], "get_inputs()": "get_inputs" in functions,
               "get_init_inputs()": "get_init_inputs" in functions}
    if not any(present.values()):
        return f"{path.name}: defines none of {', '.join(present)}: not a problem file", False
    missing = [name for name, there in present.items() if not there]
    if missing:
        hint = (f" (classes here: {', '.join(sorted(names['class']))}; pick one with --entry)"
                if not present[entry] and names["class"] else "")
        return f"{path.name}: a problem file without {' and '.join(missing)}{hint}", True
    return None, False


def check_suite(directory: str | Path, *, device: str | None = None, min_eager_ms: float = DEFAULT_MIN_EAGER_MS,
                similarity: float = DEFAULT_SIMILARITY, jobs: int = 2, entry: str = "Model") -> SuiteReport:
    directory = Path(directory)
    files, others = problem_files(directory, entry)
    with ThreadPoolExecutor(max(1, jobs)) as pool:  # each problem gets its own reference worker (a process)
        reports = list(pool.map(lambda p: check_problem(p, device=device, min_eager_ms=min_eager_ms, entry=entry,
                                                        name=_name(directory, p)), files))
    by_path = {r.path: r for r in reports}
    for a, b, kind, severity, detail in near_duplicates({str(p): p.read_text() for p in files}, similarity):
        by_path[a].flags.append(Flag(kind, severity, f"{detail} as {by_path[b].name}"))
        by_path[b].flags.append(Flag(kind, severity, f"{detail} as {by_path[a].name}"))
    return SuiteReport(str(directory), reports + others)


def _name(directory: Path, path: Path) -> str:
    return str(path.relative_to(directory)) if path.is_relative_to(directory) else path.name


# --- one problem -----------------------------------------------------------------------------------


def check_problem(path: Path, *, device: str | None = None, min_eager_ms: float = DEFAULT_MIN_EAGER_MS,
                  entry: str = "Model", name: str | None = None) -> ProblemReport:
    """Probe one problem through the evaluator's reference worker."""
    from tools import EvalOptions, Evaluator, ProblemError

    report = ProblemReport(str(path), name or path.name)
    try:
        ev = Evaluator(path, EvalOptions(device=device, trials=1, timing=False, spares=1, warm=False,
                                         reference_cache_mb=0), entry=entry)
    except ProblemError as exc:
        report.status = "invalid"
        report.flags.append(Flag("invalid", "error", str(exc)))
        return report
    with ev:
        report.device = ev.device
        problem = ev.problem
        report.bytes_moved = problem.input_bytes + problem.output_bytes + problem.param_bytes
        report.flops = problem.flops
        # draws are pulled one at a time (the evaluator keeps no outputs: reference_cache_mb=0)
        draws = {dist: _draws(ev, dist) for dist in _distributions(ev)}
        try:
            report.flags.extend(degeneracy_flags(draws))
        except ProblemError as exc:
            report.status = "invalid"
            report.flags.append(Flag("invalid", "error", str(exc)))
            return report
        report.flags.extend(_timing_flags(ev, report, min_eager_ms))
    return report


def _distributions(ev: Any) -> list[str]:
    """The distributions the evaluator's trials use for this problem, as it chooses them (the
    signed inputs narrowed, a distribution the problem does not allow dropped)."""
    names: list[str] = []
    for i in range(3):
        name = ev.trial_distribution(i, PROBE_SEEDS[0])
        if name not in names:
            names.append(name)
    return names


def _draws(ev: Any, dist: str) -> Iterable[tuple[Any, Any]]:
    for seed in PROBE_SEEDS:
        yield ev.reference_outputs(seed, dist)


def degeneracy_flags(draws: dict[str, Iterable[tuple[Any, Any]]]) -> list[Flag]:
    """Flags from (outputs, inputs after forward) per draw, per distribution (see the module docstring).
    Each distribution's draws may be a generator: only one draw's tensors are held at a time."""
    found: dict[str, dict[tuple[str, int], str]] = {dist: degenerate_kinds(pairs) for dist, pairs in draws.items()}
    own = found.get("problem", {})
    flags = []
    for (kind, index), detail in own.items():
        clean = [d.split(":")[0] for d in found if d != "problem" and (kind, index) not in found[d]]
        others = [d.split(":")[0] for d in found if d != "problem"]
        if kind in ("non-finite", "constant-inputs", "mostly-constant"):
            flags.append(Flag(kind, "warning", detail))
        elif not clean:
            also = f" and on {' and '.join(others)} ones" if others else ""
            flags.append(Flag(kind, "error", f"{detail}, on the problem's own inputs{also}"))
        else:
            flags.append(Flag(kind, "warning", f"{detail} on the problem's own inputs (not on {' or '.join(clean)} ones, "
                                               f"which other trials use)"))
    return flags


def _timing_flags(ev: Any, report: ProblemReport, min_eager_ms: float) -> list[Flag]:
    if not str(ev.device).startswith("cuda"):
        return [Flag("timing-unjudged", "info",
                     f"cannot judge whether it is too fast to time on the CPU (eager time means nothing there); "
                     f"least bytes moved {report.bytes_moved}, flops {report.flops}")]
    stats = ev.eager_time(budget_s=1.0)  # by the evaluator's protocol: fresh inputs, L2 flushed
    if not stats.measured or stats.median_ms is None:
        return [Flag("timing-unjudged", "warning", f"the eager reference could not be timed: {stats.note}")]
    report.eager_ms = stats.median_ms
    if stats.median_ms < min_eager_ms:
        return [Flag("too-fast", "warning",
                     f"eager median {stats.median_ms * 1000:.3g} us, below {min_eager_ms * 1000:.3g} us: launch overhead "
                     "and timer resolution dominate, so speedups are noise; make the inputs larger")]
    return []
