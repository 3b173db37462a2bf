"""Suite curation: find problems that cannot tell a good kernel from a bad one.

`check_suite(DIR)` looks at every problem file under DIR (`*.py` defining the entry class and
`get_inputs`; other files are skipped) and flags:

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
  uses (the problem's own and the shifted one, tools/inputs.py), warnings when only on the
  problem's own (the shifted trials still test a candidate).
- `too-fast`: on a GPU, the eager reference's median time (timed by the reference worker with
  the evaluator's timing protocol) below `min_eager_ms` (default 0.02 ms: launch overhead and
  timer resolution dominate, so speedups are noise). On the CPU this cannot be judged; the
  report says so (`timing-unjudged`, info) with the least bytes moved and flops.
- `duplicate` / `near-duplicate`: pairs of problems whose code, normalized (docstrings and
  comments dropped, local names renamed canonically), is identical, identical up to numeric
  constants (sizes, hyper-parameters), or uses the same operations (calls and operators) in a
  computation (imports and input makers aside, constants masked) at least `similarity` alike
  (default 0.9, difflib ratio over tokens). Duplicates are errors, the others warnings.
- `invalid`: a file defining the entry class whose reference does not load or run.

Severity "info" never counts as a problem with the suite; `ratchet suite check` exits 1 when
any error or warning was found.
"""
from __future__ import annotations

import ast
import builtins
import difflib
import io
import itertools
import re
import tokenize
from concurrent.futures import ThreadPoolExecutor
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

PROBE_SEEDS = (0x5EED01, 0x5EED02, 0x5EED03)  # fixed: curation needs reproducible draws, not secrecy
DISTRIBUTIONS = ("problem", "shifted")
MOSTLY_CONSTANT = 0.99
SAMPLE = 1 << 20  # elements looked at first (or only, for the mode) in large tensors
DEFAULT_MIN_EAGER_MS = 0.02
DEFAULT_SIMILARITY = 0.9
SEVERITIES = ("error", "warning", "info")


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
    """Files under `directory` that define the entry class and get_inputs; the rest, as skipped."""
    from tools.problem import ProblemError, read_problem

    found, skipped = [], []
    for path in sorted(directory.rglob("*.py")):
        if path.name == "__init__.py" or any(part.startswith(".") or part == "__pycache__" for part in path.parts):
            continue
        try:
            read_problem(path, entry)
        except ProblemError as exc:
            skipped.append(ProblemReport(str(path), _name(directory, path), status="skipped",
                                         flags=[Flag("not-a-problem", "info", str(exc))]))
            continue
        found.append(path)
    return found, skipped


def check_suite(directory: str | Path, *, device: str | None = None, min_eager_ms: float = DEFAULT_MIN_EAGER_MS,
                similarity: float = DEFAULT_SIMILARITY, jobs: int = 2, entry: str = "Model") -> SuiteReport:
    directory = Path(directory)
    files, skipped = problem_files(directory, entry)
    with ThreadPoolExecutor(max(1, jobs)) as pool:  # each problem gets its own reference worker (a process)
        reports = list(pool.map(lambda p: check_problem(p, device=device, min_eager_ms=min_eager_ms, entry=entry,
                                                        name=_name(directory, p)), files))
    by_path = {r.path: r for r in reports}
    for a, b, kind, severity, detail in near_duplicates({str(p): p.read_text() for p in files}, similarity):
        by_path[a].flags.append(Flag(kind, severity, f"{detail} as {by_path[b].name}"))
        by_path[b].flags.append(Flag(kind, severity, f"{detail} as {by_path[a].name}"))
    return SuiteReport(str(directory), reports + skipped)


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
        draws = {dist: _draws(ev, dist) for dist in DISTRIBUTIONS}
        try:
            report.flags.extend(degeneracy_flags(draws))
        except ProblemError as exc:
            report.status = "invalid"
            report.flags.append(Flag("invalid", "error", str(exc)))
            return report
        report.flags.extend(_timing_flags(ev, report, min_eager_ms))
    return report


def _draws(ev: Any, dist: str) -> Iterable[tuple[Any, Any]]:
    for seed in PROBE_SEEDS:
        yield ev.reference_outputs(seed, dist)


def degeneracy_flags(draws: dict[str, Iterable[tuple[Any, Any]]]) -> list[Flag]:
    """Flags from (outputs, inputs after forward) per draw, per distribution (see the module docstring).
    Each distribution's draws may be a generator: only one draw's tensors are held at a time."""
    found: dict[str, dict[tuple[str, int], str]] = {dist: _degenerate(pairs) for dist, pairs in draws.items()}
    own, shifted = found.get("problem", {}), found.get("shifted", {})
    flags = []
    for (kind, index), detail in own.items():
        if kind in ("non-finite", "constant-inputs", "mostly-constant"):
            flags.append(Flag(kind, "warning", detail))
        elif (kind, index) in shifted or not shifted and "shifted" not in draws:
            flags.append(Flag(kind, "error", f"{detail}, on the problem's own inputs and on shifted ones"))
        else:
            flags.append(Flag(kind, "warning", f"{detail} on the problem's own inputs (not on shifted ones, which half the trials use)"))
    return flags


@dataclass
class _Draw:
    """What one draw says, kept instead of its tensors (outputs can be GBs)."""

    out_digests: list[str | None]  # per output leaf; None for a non-tensor
    in_digests: list[str]
    constant: dict[int, float]  # output -> its single value
    mode_share: dict[int, float]  # output -> share of its most common value
    nonfinite: set[int]
    equals_input: dict[int, set[int]]  # output -> inputs it equals


def _facts(outputs: Any, inputs: Any) -> _Draw:
    import torch

    outs = _leaves(outputs)
    ins = [x for x in _leaves(inputs) if isinstance(x, torch.Tensor)]
    draw = _Draw([_digest(o) if isinstance(o, torch.Tensor) else None for o in outs], [_digest(i) for i in ins],
                 {}, {}, set(), {})
    for j, out in enumerate(outs):
        if not isinstance(out, torch.Tensor):
            continue
        if out.is_floating_point() and not bool(torch.isfinite(out).all()):
            draw.nonfinite.add(j)
        if out.numel() > 1:
            value = _constant_value(out)
            if value is not None:
                draw.constant[j] = value
            else:
                draw.mode_share[j] = _mode_share(out)
        draw.equals_input[j] = {k for k, inp in enumerate(ins) if _same(out, inp)}
    return draw


def _digest(t: Any) -> str:
    """The tensor's shape, dtype and a hash of its bytes."""
    import hashlib

    import torch

    raw = t.detach().cpu().contiguous().reshape(-1).view(torch.uint8).numpy()
    return f"{tuple(t.shape)}:{t.dtype}:{hashlib.sha256(raw).hexdigest()}"


def _degenerate(pairs: Any) -> dict[tuple[str, int], str]:
    """Degenerate kinds over draws of (outputs, inputs after forward), one draw in memory at a time."""
    draws = [_facts(o, i) for o, i in pairs]
    if not draws:
        return {}
    found: dict[tuple[str, int], str] = {}
    inputs_vary = any(d.in_digests != draws[0].in_digests for d in draws[1:])
    if draws[0].in_digests and not inputs_vary:
        found[("constant-inputs", -1)] = "get_inputs() gives the same values for every seed"
    n_out = min(len(d.out_digests) for d in draws)
    for j in range(n_out):
        label = f"output {j}" if n_out > 1 else "the output"
        if any(d.out_digests[j] is None for d in draws):
            continue  # scalars: nothing to say about their elements
        if any(j in d.nonfinite for d in draws):
            found[("non-finite", j)] = f"{label} holds NaN or Inf"
        if all(j in d.constant for d in draws):
            found[("constant-output", j)] = f"{label} is constant (every element {draws[0].constant[j]:.6g})"
            continue
        shares = [d.mode_share.get(j, 1.0) for d in draws]
        if all(j in d.mode_share or j in d.constant for d in draws) and min(shares) >= MOSTLY_CONSTANT:
            found[("mostly-constant", j)] = f"{label} is {min(shares):.1%} one value"
        if inputs_vary and all(d.out_digests[j] == draws[0].out_digests[j] for d in draws[1:]):
            found[("input-independent", j)] = f"{label} does not change when the inputs are re-drawn"
            continue
        common = set.intersection(*(d.equals_input.get(j, set()) for d in draws))
        if common:
            found[("identity", j)] = (f"{label} equals input {min(common)}: the op is trivial on these inputs "
                                      "(e.g. ReLU of non-negative values)")
    return found


def _leaves(tree: Any) -> list[Any]:
    if isinstance(tree, (list, tuple)):
        return [x for item in tree for x in _leaves(item)]
    return [tree]


def _same(a: Any, b: Any) -> bool:
    import torch

    if not (isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor)):
        return False
    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    fa, fb = a.reshape(-1), b.reshape(-1)
    step = max(1, fa.numel() // SAMPLE)
    if not _close(fa[::step], fb[::step]):  # most outputs differ from the inputs: a sample says so cheaply
        return False
    return _close(fa, fb)


def _close(a: Any, b: Any) -> bool:
    import torch

    if a.is_floating_point() or a.is_complex():
        return bool(torch.allclose(a, b, rtol=1e-6, atol=0.0, equal_nan=True))
    return bool(torch.equal(a, b))


def _constant_value(t: Any) -> float | None:
    flat = t.reshape(-1)
    first = flat[0]
    if bool((flat == first).all()):
        return float(first.real if flat.is_complex() else first)
    return None


def _mode_share(t: Any) -> float:
    """The share of the most common value (estimated on an evenly strided sample of large tensors)."""
    import torch

    flat = t.reshape(-1)
    if flat.is_complex():
        return 0.0
    flat = flat[:: max(1, flat.numel() // SAMPLE)]
    _, counts = torch.unique(flat, return_counts=True)
    return float(counts.max()) / flat.numel()


def _timing_flags(ev: Any, report: ProblemReport, min_eager_ms: float) -> list[Flag]:
    if not str(ev.device).startswith("cuda"):
        return [Flag("timing-unjudged", "info",
                     f"cannot judge whether it is too fast to time on the CPU (eager time means nothing there); "
                     f"least bytes moved {report.bytes_moved}, flops {report.flops}")]
    stats = eager_time(ev)
    if not stats.measured or stats.median_ms is None:
        return [Flag("timing-unjudged", "warning", f"the eager reference could not be timed: {stats.note}")]
    report.eager_ms = stats.median_ms
    if stats.median_ms < min_eager_ms:
        return [Flag("too-fast", "warning",
                     f"eager median {stats.median_ms * 1000:.3g} us, below {min_eager_ms * 1000:.3g} us: launch overhead "
                     "and timer resolution dominate, so speedups are noise; make the inputs larger")]
    return []


def eager_time(ev: Any, budget_s: float = 1.0):
    """The eager reference's median time, by the evaluator's protocol (fresh inputs, L2 flushed)."""
    from tools import profile
    from tools.record import TimeStats
    from tools.stats import SampleCollector, to_time_stats

    plan = profile.plan(ev)
    collector = SampleCollector(budget_s=min(budget_s, plan.budget_s), max_samples=ev.options.timing_max_samples)
    n, warm = 0, plan.call(10**9)[1]
    while not collector.done():
        calls = [plan.call(n + i) for i in range(plan.block)]
        header, _ = ev.reference.request({"op": "time", "calls": calls, "warmup_seed": warm}, ev.options.trial_timeout)
        if header.get("op") == "error":
            return TimeStats(note=f"timing failed: {str(header.get('message', ''))[:300]}")
        warm = None
        collector.extend(header["samples"])
        n += plan.block
    return to_time_stats(collector)


# --- near-duplicates ---------------------------------------------------------------------------------

_KEEP = set(dir(builtins)) | {"self", "Model", "forward", "get_inputs", "get_init_inputs", "__init__", "super"}
_TOKEN = re.compile(r"\w+|[^\s\w]")


def normalized(source: str, *, constants: bool = True) -> ast.Module | None:
    """The code's AST with docstrings dropped and local names renamed canonically (imports,
    builtins and the problem contract's names kept); numbers masked unless `constants`."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return None
    imported = {(a.asname or a.name).split(".")[0] for node in ast.walk(tree)
                if isinstance(node, (ast.Import, ast.ImportFrom)) for a in node.names}
    keep = _KEEP | imported
    names: dict[str, str] = {}

    def rename(name: str) -> str:
        if name in keep:
            return name
        return names.setdefault(name, f"v{len(names)}")

    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and body:
            if isinstance(body[0], ast.Expr) and isinstance(getattr(body[0], "value", None), ast.Constant) \
                    and isinstance(body[0].value.value, str):
                node.body = body[1:] or [ast.Pass()]
    for node in ast.walk(tree):
        if isinstance(node, ast.Name):
            node.id = rename(node.id)
        elif isinstance(node, ast.arg):
            node.arg = rename(node.arg)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            node.name = rename(node.name)
        elif not constants and isinstance(node, ast.Constant) and isinstance(node.value, (int, float, complex)) \
                and not isinstance(node.value, bool):
            node.value = 0
    return tree


def computation(tree: ast.Module) -> ast.Module:
    """The part of a problem that computes: no imports, no get_inputs / get_init_inputs."""
    body = [n for n in tree.body if not isinstance(n, (ast.Import, ast.ImportFrom))
            and not (isinstance(n, ast.FunctionDef) and n.name in ("get_inputs", "get_init_inputs"))]
    return ast.Module(body=body, type_ignores=[])


def operations(tree: ast.AST) -> list[str]:
    """The ops a computation uses: called names (torch.relu, F.softplus, nn.Conv2d) and operators."""
    ops = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            func = node.func
            ops.append(func.attr if isinstance(func, ast.Attribute) else ast.unparse(func))
        elif isinstance(node, (ast.BinOp, ast.UnaryOp, ast.AugAssign)):
            ops.append(type(node.op).__name__)
        elif isinstance(node, ast.Compare):
            ops.extend(type(op).__name__ for op in node.ops)
        elif isinstance(node, ast.Subscript):
            ops.append("Subscript")
    return sorted(ops)


def _tokens(text: str) -> list[str]:
    try:
        return [t.string for t in tokenize.generate_tokens(io.StringIO(text).readline)
                if t.type not in (tokenize.NL, tokenize.NEWLINE, tokenize.INDENT, tokenize.DEDENT, tokenize.ENDMARKER)]
    except (tokenize.TokenError, SyntaxError):
        return _TOKEN.findall(text)


def near_duplicates(sources: dict[str, str], threshold: float = DEFAULT_SIMILARITY) -> list[tuple[str, str, str, str, str]]:
    """(a, b, kind, severity, detail) for each pair of similar problems:
    - duplicate: the same normalized code;
    - near-duplicate: the same normalized code up to numeric constants, or the same operations
      and a computation (inputs aside, constants masked) at least `threshold` similar."""
    forms = {}
    for path, source in sources.items():
        exact, masked = normalized(source), normalized(source, constants=False)
        if exact is not None and masked is not None:
            comp = computation(masked)
            forms[path] = (ast.unparse(exact), ast.unparse(masked), _tokens(ast.unparse(comp)), operations(comp))
    pairs = []
    for a, b in itertools.combinations(sorted(forms), 2):
        (ea, ma, ta, oa), (eb, mb, tb, ob) = forms[a], forms[b]
        if ea == eb:
            pairs.append((a, b, "duplicate", "error", "the same code (up to names, comments and docstrings)"))
        elif ma == mb:
            pairs.append((a, b, "near-duplicate", "warning", "the same code up to numeric constants (sizes, parameters)"))
        elif oa == ob:
            matcher = difflib.SequenceMatcher(None, ta, tb, autojunk=False)
            if matcher.real_quick_ratio() >= threshold and matcher.quick_ratio() >= threshold:
                ratio = matcher.ratio()
                if ratio >= threshold:
                    pairs.append((a, b, "near-duplicate", "warning", f"the same operations, {ratio:.0%} similar code"))
    return pairs
