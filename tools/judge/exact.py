"""The float64-judged accuracy bound (docs/precision.md): a floating output's error against the
reference evaluated in float64 may be at most a multiple of eager's own error against it, plus a
floor of a few units in the last place of the output's scale.

    ||c - r64||      <= norm_multiple * ||r32 - r64||      + ulps * eps * ||r64||
    max |c - r64|    <= max_multiple  * max |r32 - r64|    + ulps * eps * max |r64|

r32 is eager's output in the run's precision (IEEE float32 under `fp32`, TF32 under `tf32`), so the
yardstick is the arithmetic the baselines are timed with; eps is the output dtype's machine epsilon
(float32's for the half types of --precision bf16|fp16: `floor_eps`).
Only the finite elements of r64 count (the NaN/Inf pattern is checked against r32 by compare.py).
The multiples are calibrated on a GPU by benchmarks/precision_calibration.py: every honest
reordering of sums measured (IEEE and 3xTF32 dots with other tilings, split-K with atomics, online
softmax, Welford) lands within them, and TF32, fp16 and bf16 products land far outside.

Errors add over trials (`ExactErrors.add`): an output of few elements (a loss, a row of sums) has
too few of them for its eager error to be a stable yardstick (eager may land on the float64 value
by luck), so such outputs are judged on their errors pooled over the trials (tools/judge/trials.py).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from tools.options import Float64Bound

if TYPE_CHECKING:  # torch is imported where errors are computed
    import torch

CHUNK = 1 << 25
POOL_BELOW = 4096  # finite elements: an output with fewer is judged on its errors pooled over trials
# dtypes judged against float64 (a half type's yardstick is eager's error in that type, --precision
# bf16|fp16), and how many times their bytes the float64 copies take
WIDENING = {"torch.float32": 2, "torch.bfloat16": 4, "torch.float16": 4, "torch.complex64": 2}
EXACT_DTYPES = tuple(WIDENING)
STRESS = "stress"  # the pool key of the stress trial: its small outputs are not pooled (one trial is too few)
# On the stress trial the worst 1 in TRIM elements of each error (the candidate's and eager's, each its
# own) are left out: at 1000x a softmax over dot products is an argmax whose near-ties any honest
# reordering breaks its own way, and eager is sometimes lucky (docs/precision.md, "The stress trial").
TRIM = 1024


@dataclass
class ExactErrors:
    """Sums of squares and maxima of one output's errors against float64 (pooled with add())."""

    cand_sq: float = 0.0
    eager_sq: float = 0.0
    ref_sq: float = 0.0
    cand_max: float = 0.0
    eager_max: float = 0.0
    ref_max: float = 0.0
    count: int = 0
    eps: float = 2.0 ** -23
    trimmed: int = 0  # elements left out of each error: the worst 1 in TRIM on the stress trial

    @property
    def cand_norm(self) -> float:
        return math.sqrt(self.cand_sq)

    @property
    def eager_norm(self) -> float:
        return math.sqrt(self.eager_sq)

    @property
    def ref_norm(self) -> float:
        return math.sqrt(self.ref_sq)

    def add(self, other: "ExactErrors") -> None:
        self.cand_sq += other.cand_sq
        self.eager_sq += other.eager_sq
        self.ref_sq += other.ref_sq
        self.cand_max = max(self.cand_max, other.cand_max)
        self.eager_max = max(self.eager_max, other.eager_max)
        self.ref_max = max(self.ref_max, other.ref_max)
        self.count += other.count
        self.eps = other.eps
        self.trimmed += other.trimmed

    def ratios(self) -> tuple[float, float]:
        """(norm, max): the candidate's error as a multiple of eager's (inf where eager's is 0)."""
        def ratio(a: float, b: float) -> float:
            return a / b if b > 0 else (0.0 if a == 0 else math.inf)
        return ratio(self.cand_norm, self.eager_norm), ratio(self.cand_max, self.eager_max)


def outside(bound: Float64Bound, e: ExactErrors) -> str | None:
    """Why `e` is outside `bound` (one phrase), or None."""
    if e.count == 0:
        return None
    trimmed = f" (the worst 1 in {TRIM} elements of each left out)" if e.trimmed else ""
    norm_allowed = bound.norm_multiple * e.eager_norm + bound.ulps * e.eps * e.ref_norm
    if e.cand_norm > norm_allowed:
        rel = e.cand_norm / e.ref_norm if e.ref_norm > 0 else e.cand_norm
        eager = e.eager_norm / e.ref_norm if e.ref_norm > 0 else e.eager_norm
        return (f"its error against a float64 evaluation of the reference{trimmed} is {rel:.3g} (relative norm), "
                f"{_times(e.cand_norm, e.eager_norm)} eager float32's own ({eager:.3g}); at most "
                f"{bound.norm_multiple:g}x plus {bound.ulps:g} ulps is allowed: a lower-precision product "
                "(TF32, fp16, bf16) or an unstable formula")
    max_allowed = bound.max_multiple * e.eager_max + bound.ulps * e.eps * e.ref_max
    if e.cand_max > max_allowed:
        return (f"its largest error against a float64 evaluation of the reference{trimmed} is {e.cand_max:.3g}, "
                f"{_times(e.cand_max, e.eager_max)} eager float32's largest ({e.eager_max:.3g}); at most "
                f"{bound.max_multiple:g}x plus {bound.ulps:g} ulps is allowed: a lower-precision product "
                "(TF32, fp16, bf16) in part of the output, or an unstable formula")
    return None


def _times(a: float, b: float) -> str:
    return f"{a / b:.3g}x" if b > 0 else "while eager's is 0, unlike"


def exact_errors(r64: torch.Tensor, r32: torch.Tensor, cand: torch.Tensor, trim: bool = False) -> ExactErrors:
    """One output's errors against float64: the candidate's and eager's, over the elements where r64
    and eager's r32 are finite, computed on the tensors' device in float64 with one host sync (and one
    per chunk with `trim`). With `trim`, each error leaves out its own worst 1 in TRIM of the judged
    elements of every chunk (its norm and its largest are of the rest): the stress trial's near-ties
    (STRESS, TRIM)."""
    import torch

    if r64.is_complex():
        r64, r32, cand = (torch.view_as_real(t) for t in (r64, r32, cand))
    r, e, c = r64.reshape(-1), r32.reshape(-1), cand.reshape(-1)
    zero = torch.zeros((), dtype=torch.float64, device=r.device)
    acc = [zero.clone() for _ in range(7)]
    trimmed = 0
    for i in range(0, r.numel(), CHUNK):
        rs = r[i:i + CHUNK].to(torch.float64)
        es = e[i:i + CHUNK].to(device=r.device, dtype=torch.float64)
        finite = torch.isfinite(rs) & torch.isfinite(es)  # where eager overflowed, compare.py judged the pattern
        rs = torch.where(finite, rs, 0.0)
        dc = torch.where(finite, c[i:i + CHUNK].to(device=r.device, dtype=torch.float64) - rs, 0.0)
        de = torch.where(finite, es - rs, 0.0)
        dc = torch.where(torch.isnan(dc), math.inf, dc)  # a NaN where float64 is finite: outside any bound
        if trim and (k := int(finite.sum()) // TRIM):  # of the elements judged (a NaN or Inf left out here
            # is still the float32 comparison's nan-pattern failure); a chunk of fewer than TRIM keeps all
            dc, de = (d.index_fill(0, d.abs().topk(k).indices, 0.0) for d in (dc, de))
            trimmed += k
        acc[0] += (dc * dc).sum()
        acc[1] += (de * de).sum()
        acc[2] += (rs * rs).sum()
        acc[3] = torch.maximum(acc[3], dc.abs().max())
        acc[4] = torch.maximum(acc[4], de.abs().max())
        acc[5] = torch.maximum(acc[5], rs.abs().max())
        acc[6] += finite.sum()
    cand_sq, eager_sq, ref_sq, cand_max, eager_max, ref_max, count = torch.stack(acc).tolist()
    return ExactErrors(cand_sq, eager_sq, ref_sq, cand_max, eager_max, ref_max, int(count), floor_eps(r32.dtype), trimmed)


def floor_eps(dtype: "torch.dtype") -> float:
    """The epsilon of the bound's floor for outputs of `dtype`: its own, except for the half types,
    whose floor is float32's. A half-precision output's rounding is in eager's own error already
    (eager computes in float32 inside and rounds once), and four of its own ulps (2^-6 of the
    output's scale for bfloat16) would admit about fourteen times that rounding: an fp8 product."""
    import torch

    return torch.finfo(torch.float32 if dtype in (torch.bfloat16, torch.float16) else dtype).eps


def tree_tensors(tree: Any, path: str = "output") -> list[tuple[str, Any]]:
    """(path, leaf) of every tensor in an output tree, in order."""
    import torch

    if isinstance(tree, torch.Tensor):
        return [(path, tree)]
    if isinstance(tree, (list, tuple)):
        return [x for i, v in enumerate(tree) for x in tree_tensors(v, f"{path}[{i}]")]
    return []


class ExactJudge:
    """One evaluation's float64 judging, trial by trial: an output of POOL_BELOW finite elements or
    more is judged at once; a smaller one's errors are pooled per `key` ("trials", held-out ones
    included; "timed") and judged by final(); the stress trial's small outputs are not pooled.
    Keeps the worst ratios for the record."""

    def __init__(self, bound: Float64Bound) -> None:
        self.bound = bound
        self.pools: dict[str, ExactErrors] = {}
        self.worst_norm = 0.0
        self.worst_max = 0.0
        self.judged = 0  # outputs judged, one per output per trial
        self.timed_samples = 0  # timed calls judged (tools/timing/timed_exact.py)
        self.rng: Any = None  # which timed calls and sampled rows are judged: random()
        self.sampled_rows = 0  # rows judged where a whole float64 evaluation does not fit (tools/judge/exact_rows.py)
        self.skipped: dict[str, str] = {}  # what was not judged in float64, and why
        # where rows do not judge an output (tools/judge/exact_host.py): outputs judged on the host, timed
        # calls that needed it, and the one drawn of them: (source, HostTake, call number), judged when
        # the timing ends
        self.host_sets = 0
        self.host_seen = 0
        self.host_pending: Any = None
        self.last: ExactErrors | None = None  # the errors observe_one() computed last

    def random(self, bench: Any) -> Any:
        """The parent's secret randomness for what is sampled after the candidate answered (timed
        calls, rows); reproducible only under an explicit `EvalOptions.seed`."""
        if self.rng is None:
            import random
            import secrets

            self.rng = random.Random(bench.options.seed) if bench.options.seed is not None else secrets.SystemRandom()
        return self.rng

    def observe(self, key: str, r64: Any, r32: Any, cand: Any) -> str | None:
        """Why the candidate's outputs `cand` are outside the bound (naming the output), or None."""
        wide, outs = dict(tree_tensors(r64)), dict(tree_tensors(cand))
        for path, ref in tree_tensors(r32):
            out = outs.get(path)
            if str(ref.dtype) not in EXACT_DTYPES or out is None or not ref.numel():
                continue
            if (why := self.observe_one(key, path, wide.get(path), ref, out)) is not None:
                return why
        return None

    def observe_one(self, key: str, path: str, twin: Any, ref: Any, out: Any) -> str | None:
        """observe() for one output: `twin` its float64 evaluation, `ref` eager's, `out` the candidate's."""
        import torch

        if not isinstance(twin, torch.Tensor) or twin.dtype not in (torch.float64, torch.complex128) \
                or twin.shape != ref.shape:
            self.skipped[path] = "the reference's float64 evaluation does not give it in float64"
            return None
        e = exact_errors(twin, ref, out, trim=key == STRESS)
        self.judged += 1
        self.last = e
        if e.count >= POOL_BELOW:
            if (why := self._judge(e)) is not None:
                return f"{path}: {why}"
        elif key != STRESS:  # one stress trial is too few to pool: a small output keeps the float32 tolerance there
            self.pools.setdefault(f"{key}:{path}", ExactErrors()).add(e)
        return None

    def final(self) -> str | None:
        """Judge the pooled small outputs (then forgotten)."""
        pools, self.pools = self.pools, {}
        for name, e in pools.items():
            if (why := self._judge(e)) is not None:
                path = name.rsplit(":", 1)[1]
                return f"{path} (pooled over the trials: it has fewer than {POOL_BELOW} elements): {why}"
        return None

    def _judge(self, e: ExactErrors) -> str | None:
        norm, peak = e.ratios()
        self.worst_norm, self.worst_max = max(self.worst_norm, norm), max(self.worst_max, peak)
        return outside(self.bound, e)
