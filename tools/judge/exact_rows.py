"""The float64-judged bound on a sample of rows, for a float32 problem whose whole float64
evaluation does not fit (over `EvalOptions.float64_max_mb`; docs/precision.md).

After the candidate has answered (a trial, or a timed call: tools/timing/timed_exact.py), the
parent draws rows of the batch (the leading size of the first floating output) with its own
secret randomness, takes those rows of the candidate's outputs and of eager's, and asks the
reference worker for the reference on the same inputs cut to those rows: in float64, and in
float32 beside it. The rows are judged only if they are independent of the rest of the batch: eager
on the whole batch must be within the same bound of the float64 rows as eager on the rows alone
(a model that mixes rows, a batch norm say, fails this). The candidate's rows are then held to the
bound, eager's rows on the whole batch being the yardstick, as in a whole evaluation
(tools/judge/exact.py). An output whose rows do not stand alone is judged on elements of the set
evaluated in float64 on the host instead (tools/judge/exact_host.py; `decide_host` finds, when the
evaluator opens, which outputs those are on every distribution and whether the host can do it), or,
where it cannot, recorded as not judged, and why.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from tools.judge.exact import EXACT_DTYPES, exact_errors, outside, tree_tensors
from tools.judge.exact_host import HOST_AGREES, HOST_MAX_S, HostTake, host_refused, judge_host, take
from tools.processes.reference import clone_tree

if TYPE_CHECKING:
    from tools.judge.exact import ExactJudge

MAX_ROWS = 64  # rows of the batch evaluated in float64 per sampled set, at most
MIN_ROWS = 8  # ... and at least (or the whole batch, when smaller), whatever float64_max_mb says


@dataclass
class RowSample:
    """Where a set's inputs come from, for the reference worker: {"seed", "distribution"} (a
    trial's set) or {"slot", "seed"} (a timing-pool set)."""

    bench: Any  # the evaluation's Bench (tools/judge/bench.py; not imported: the bench's modules import this one)
    source: dict[str, Any]
    # where the host evaluation is possible (bench.host_ok, tools/judge/exact_host.py), the outputs this
    # set's rows do not judge (bench.host_paths, found at open, or rows that mix on this set) are judged on
    # the host's elements: at once, or (`defer`, a timed call) left in `pending` for the caller
    host: bool = False
    defer: bool = False
    judged_paths: set[str] = field(default_factory=set)  # the outputs its rows judged
    pending: HostTake | None = None

    @property
    def where(self) -> str:
        """The set, as the record names it: its distribution, or a timed call."""
        return str(self.source.get("distribution") or "timed call")

    def observe(self, judge: "ExactJudge", key: str, r32: Any, cand: Any) -> str | None:
        """Why the candidate's sampled rows (or, where rows do not judge an output, its elements
        evaluated on the host) are outside the bound (naming the output), or None. `r32` and `cand`
        may be views into the workers' arenas: what is judged is copied out of them before the
        reference worker is asked for anything."""
        took = take(self.bench, judge, r32, cand, None) if self.host and self.bench.host_ok else None
        if (why := self._rows(judge, key, r32, cand)) is not None or took is None:
            return why
        took.taken = [item for item in took.taken if item[0] not in self.judged_paths]
        if not took.taken:
            return None
        if self.defer:
            self.pending = took
            return None
        return judge_host(self.bench, judge, key, self.source, took, where=self.where)

    def _rows(self, judge: "ExactJudge", key: str, r32: Any, cand: Any) -> str | None:
        if not self.host:  # a held-out set: the outputs left to the host are not judged on it
            for path in self.bench.host_paths:
                judge.skipped[f"{path} ({self.where})"] = ("its rows do not stand alone, and a held-out set is not "
                                                           "evaluated on the host")
        outs = dict(tree_tensors(cand))
        judged: list[tuple[str, Any, Any]] = [
            (path, ref, outs[path]) for path, ref in tree_tensors(r32)
            if str(ref.dtype) in EXACT_DTYPES and ref.dim() >= 1 and ref.numel() and outs.get(path) is not None
            and path not in self.bench.host_paths]  # rows cannot judge those (found at open): the host does
        if not judged:
            if not self.bench.host_paths:
                judge.skipped[key] = "no float32 output along a batch to sample rows of (a scalar, say)"
            return None
        batch = int(judged[0][1].shape[0])
        rows = sorted(judge.random(self.bench).sample(range(batch), self.rows(batch)))
        import torch

        index = torch.tensor(rows, dtype=torch.long, device=judged[0][1].device)
        cut: list[tuple[str, Any, Any]] = []
        for path, ref, out in judged:
            if ref.shape[0] != batch or out.shape != ref.shape:
                judge.skipped[f"{path} ({self.where})"] = f"not along the batch of {batch} rows (sampled rows only)"
                continue
            cut.append((path, ref.index_select(0, index), out.to(ref.device).index_select(0, index)))
        del judged, outs
        known = self.bench.row_plan  # batch size -> the cut found for it (None: every batch-leading input)
        for plan in ([known[batch]] if batch in known else self._plans(batch)):
            found, judged_any = self._judge_rows(judge, key, rows, batch, plan, cut)
            if judged_any or found is not None:
                self.bench.row_plan[batch] = plan  # the first cut whose rows stand alone, kept for the bench
                return found
        return None

    def _plans(self, batch: int) -> list[list[Any] | None]:
        """Which inputs to cut to the rows, tried in turn until the reference on the cut inputs
        gives eager's rows: every input whose leading size is the batch (None), then each alone (a
        square product's second operand has the batch's size too, and must stay whole), then an
        input along a later dimension of the batch's size ([index, dim]: the first operand of
        `a.T @ b`, whose columns are the output's rows)."""
        tensors = [(i, list(item.get("shape") or [])) for i, item in enumerate(self.bench.problem.inputs)
                   if item.get("kind") == "tensor"]
        leading = [i for i, shape in tensors if shape[:1] == [batch]]
        later = [[i, d] for i, shape in tensors for d in range(1, len(shape)) if shape[d] == batch]
        return [None] + ([[i] for i in leading] if len(leading) > 1 else []) + [[cut] for cut in later]

    def _judge_rows(self, judge: "ExactJudge", key: str, rows: list[int], batch: int, plan: list[Any] | None,
                    cut: list[tuple[str, Any, Any]]) -> tuple[str | None, bool]:
        """(why the rows are outside the bound, or None; whether any output was judged) for one cut."""
        import torch

        with self.bench.lock:  # the reference worker is one pipe; evaluations at once take turns (re-entrant)
            header, payload = self.bench.reference.checked(
                {"op": "wide", **self.source, "rows": rows, "batch": batch, "cut": plan,
                 "arena_cap": self.bench.arena_cap(1, outputs_only=True) + 2 * self.bench.problem.output_bytes},
                self.bench.options.trial_timeout)
            if header.get("float64_skipped"):
                judge.skipped[key] = f"sampled rows: {header['float64_skipped']}"
                return None, False
            wide, narrow = self.bench.reference.outputs(header, payload)  # views into its arena: copied below
            wide, narrow = clone_tree(wide), clone_tree(narrow)
        wide, narrow = dict(tree_tensors(wide)), dict(tree_tensors(narrow))
        judged_any = False
        for path, ref_rows, out_rows in cut:
            twin, alone = wide.get(path), narrow.get(path)
            if not isinstance(alone, torch.Tensor) or not isinstance(twin, torch.Tensor) or alone.shape != ref_rows.shape:
                judge.skipped[f"{path} ({self.where})"] = "the reference on the sampled rows alone does not give it at their shape"
                continue
            if (mixed := outside(judge.bound, exact_errors(twin, alone, ref_rows))) is not None:
                judge.skipped[f"{path} ({self.where})"] = (
                    "its rows are not independent of the rest of the batch (eager on the whole batch against eager on "
                    f"the sampled rows alone: {mixed[:120]})")
                continue
            judged_any = True
            self.judged_paths.add(path)
            judge.skipped.pop(f"{path} ({self.where})", None)
            judge.skipped.pop(key, None)
            judge.sampled_rows += len(rows)
            if (why := judge.observe_one(key, path, twin, ref_rows, out_rows)) is not None:
                return f"{why} (on {len(rows)} rows of {batch} sampled after the candidate answered)", True
        return None, judged_any

    def rows(self, batch: int) -> int:
        """Rows per sample: what a quarter of float64_max_mb holds of the float64 inputs and outputs
        of one row, between MIN_ROWS and MAX_ROWS (the whole batch when smaller)."""
        problem = self.bench.problem
        per_row = 2 * (problem.input_bytes + problem.output_bytes) / max(batch, 1)
        fit = int((self.bench.options.float64_max_mb << 20) // 4 // max(per_row, 1.0))
        return max(min(MIN_ROWS, batch), min(MAX_ROWS, batch, fit))


def decide_host(bench: Any) -> str | None:
    """At open, before any candidate: which outputs sampled rows judge on every distribution of
    the trials (eager's own outputs standing in for a candidate's), and whether the host evaluation
    runs for the rest and for sets whose rows turn out to mix later: within HOST_MAX_S, and agreeing
    with eager. Sets `bench.host_ok`, `bench.host_paths` (the outputs rows leave to the host) and
    `bench.host_seconds`; returns why the host evaluation is not used (None: it is, or no output
    needs it)."""
    import time

    from tools.judge.exact import ExactJudge
    from tools.processes.process import WorkerGone
    from tools.problem import ProblemError
    from tools.processes.reference import ReferenceLost

    assert bench.options.float64_bound is not None
    scratch = ExactJudge(bench.options.float64_bound)
    sets: dict[str, int] = {}  # one seed per distribution the trials use
    for i, seed in enumerate(bench.seeds):
        sets.setdefault(bench.distribution(i, seed), seed)
    everywhere: set[str] | None = None
    took, floats, first = None, [], {}
    for dist, seed in sets.items():
        with bench.lock:  # eager's outputs are views into the reference's arena: what is judged is copied out first
            r32 = bench.reference_outputs(seed, dist, borrow=True)[0]
            floats = [path for path, ref in tree_tensors(r32) if str(ref.dtype) in EXACT_DTYPES and ref.numel()]
            if took is None:
                first, took = {"seed": seed, "distribution": dist}, take(bench, scratch, r32, r32, None)
            rows = RowSample(bench, {"seed": seed, "distribution": dist})
            rows.observe(scratch, "trials", r32, r32)
            del r32
        everywhere = rows.judged_paths if everywhere is None else everywhere & rows.judged_paths
    left = {path for path in floats if path not in (everywhere or set())}
    if took is None or not took.taken:
        return None
    if (why := host_refused(bench)) is not None:
        return why
    t0 = time.monotonic()
    try:
        judge_host(bench, scratch, "trials", first, took, timeout=1.5 * HOST_MAX_S)
    except (ReferenceLost, WorkerGone, ProblemError) as exc:  # too slow, past the reference's host memory, or
        # an error reply: not used, and the problem opens as it did without it
        bench.reference.ensure_alive()
        return f"the float64 evaluation on the host failed at open ({str(exc)[:200]})"
    seconds = time.monotonic() - t0
    failed = {p: w for p, w in scratch.skipped.items() if w.startswith("host")}
    if failed:
        return "; ".join(f"{p}: {w}" for p, w in sorted(failed.items()))
    if seconds > HOST_MAX_S:
        return f"a float64 evaluation on the host took {seconds:.1f} s, over {HOST_MAX_S:g} s"
    e = scratch.last
    if e is None or (e.ref_norm > 0 and e.eager_norm > HOST_AGREES * e.ref_norm):
        off = f"{e.eager_norm / e.ref_norm:.3g}" if e is not None and e.ref_norm > 0 else "unknown"
        return (f"eager differs from the float64 evaluation on the host by {off} (relative norm): a forward that "
                "is random, or computes otherwise on the host")
    bench.host_ok, bench.host_paths, bench.host_seconds = True, left, seconds
    return None
