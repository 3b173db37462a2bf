"""The suite report of a batch run: the table, the headline numbers, and one HTML page.

Reads a run directory (`ratchet batch --out DIR`: `results.jsonl`, `run.json`) or a results
JSONL file. The latest row of each problem counts. The headline numbers, as the field uses them:

- fraction correct: problems with a correct kernel / all problems;
- fraction faster than eager (torch.compile): problems with a correct, timed kernel, not kept
  eager, whose speedup against eager PyTorch (torch.compile) is above 1.0 / all problems;
- geometric-mean speedup against torch.compile (and against eager) over all problems, where a
  failed problem (no correct kernel), a kept-eager problem and a problem with no torch.compile
  time count as 1.0x;
- mean roofline fraction: over the problems with a correct, timed kernel.

A problem is "kept eager" when its best kernel and eager PyTorch were both timed and the kernel
is not faster beyond noise (agent/loop/kept_eager.py; the row's `kept_eager`, or for rows written
before it, a measured speedup against eager of at most 1.0, which can never be faster beyond
noise): the reference stays the answer, so it counts as 1.0x against eager, never as a slowdown,
and as faster than neither eager nor torch.compile. Its kernel's own ratio is still shown beside
it (`best 0.11x`), and the RL reward keeps the honest ratio.

A problem whose row has verdict `error` and no correct kernel was never judged: ratchet failed
(an evaluator fault, or the agent raised), not the model. It is shown as an evaluator fault and
counted apart (`evaluator_faults`), neither correct nor incorrect; the fractions above keep it in
their denominator (as not correct, 1.0x in the geometric mean), so that a fault can never raise a
figure: a candidate that brings the evaluator down must not shrink the set it is judged on.

Cost (agent/cost.py): each row's `cost_usd` is its agent run's dollars, every session of it (row
schema 4). The headline sums the problems that have a price; a problem whose model has none reads
"no price" (never $0) and is listed apart with its tokens; the built-in policy costs $0 (no model,
no tokens); rows written before schema 4 read "not recorded".

Timing needs a GPU: where nothing was timed (a CPU run) every speed figure reads "not measured",
never a number. The HTML page is agent/batch/report_page.py's.
"""
from __future__ import annotations

import json
import math
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agent.batch.log import RESULTS, RUN_META, RunLog
from agent.cost import NO_PRICE, format_usd

TEMPLATES = Path(__file__).resolve().parents[1] / "templates"
NOT_MEASURED = "not measured"
FAILURE_NOTE = ("failed problems (no correct kernel), kept-eager problems (no kernel faster than PyTorch) and "
                "problems without a torch.compile time count as 1.0x in the geometric mean")
KEPT_EAGER = "kept eager"
KEPT_NOTE = ("kept eager: the best kernel and eager PyTorch were both timed and the kernel is not faster beyond "
             "noise; the reference stays the answer, counted as 1.0x against eager (never as a slowdown) and as "
             "faster than neither eager nor torch.compile")
FAULT_VERDICT = "error"  # a row's verdict when ratchet failed (tools.record.Verdict.ERROR, or the agent raised)
FAULT_NOTE = ("evaluator faults (verdict error: ratchet failed, not the model) were never judged: neither correct "
              "nor incorrect, they stay in every denominator as not correct (1.0x); rerun them")


@dataclass
class Run:
    path: Path  # the run directory (or the JSONL file's directory)
    rows: list[dict[str, Any]]  # the latest row per problem, in suite order
    meta: dict[str, Any] = field(default_factory=dict)
    missing: list[str] = field(default_factory=list)  # problems of the run with no row yet
    gpu_price_per_hour: float | None = None  # `ratchet report --gpu-price-per-hour`: GPU dollars shown too


class ReportError(Exception):
    """The run cannot be read; str() is one line."""


def load_run(path: Path | str) -> Run:
    path = Path(path)
    results = path / RESULTS if path.is_dir() else path
    if not results.is_file():
        raise ReportError(f"{path}: no {RESULTS} (give a batch run directory or its results file)")
    meta_path = results.parent / RUN_META
    try:
        meta = json.loads(meta_path.read_text()) if meta_path.is_file() else {}
    except (OSError, ValueError):
        meta = {}
    try:
        latest = RunLog(results).latest()
    except OSError as exc:
        raise ReportError(f"{results}: cannot read it: {exc.strerror or exc}") from None
    if not latest and results.name != RESULTS and not meta_path.is_file():  # e.g. `ratchet report problem.py`
        raise ReportError(f"{path}: not a batch run (no result rows, no {RUN_META} beside it; give a run directory "
                          f"made by `ratchet batch --out DIR` or its {RESULTS})")
    order = [k for k in meta.get("problems", []) if k in latest]
    order += sorted(k for k in latest if k not in order)
    missing = [k for k in meta.get("problems", []) if k not in latest]
    return Run(results.parent, [latest[k] for k in order], meta, missing)


# --- the numbers --------------------------------------------------------------------------------


def timed(row: dict[str, Any]) -> bool:
    """A correct kernel with a measured time (only then are its speed figures numbers)."""
    return bool(row.get("correct")) and bool(row.get("timing_measured")) and row.get("speedup_vs_eager") is not None


def kept_eager(row: dict[str, Any]) -> bool:
    """A correct, timed kernel not faster than eager beyond noise: the row's `kept_eager` (written by
    agent/batch/problem.py from the best's record), else, for rows written before that field, a
    speedup of at most 1.0 (a median no faster than eager's is never faster beyond noise)."""
    if not timed(row):
        return False
    if isinstance(row.get("kept_eager"), bool):
        return row["kept_eager"]
    return row["speedup_vs_eager"] <= 1.0


def faster(row: dict[str, Any]) -> bool:
    """A correct, timed kernel that is the problem's answer (not kept eager)."""
    return timed(row) and not kept_eager(row)


def evaluator_fault(row: dict[str, Any]) -> bool:
    """No correct kernel and the verdict `error`: the problem was never judged (ratchet failed)."""
    return not row.get("correct") and row.get("verdict") == FAULT_VERDICT


def verdict_cell(row: dict[str, Any]) -> str:
    return f"{FAULT_VERDICT} (evaluator fault)" if evaluator_fault(row) else str(row.get("verdict"))


def headline(rows: list[dict[str, Any]]) -> dict[str, Any]:
    n = len(rows)
    correct = sum(bool(r.get("correct")) for r in rows)
    faults = [r["problem"] for r in rows if evaluator_fault(r)]
    measured = [r for r in rows if timed(r)]
    kept = [r["problem"] for r in rows if kept_eager(r)]
    not_general = [r["problem"] for r in rows if r.get("correct") and r.get("generalizes") is False]
    library = [r["problem"] for r in rows if r.get("correct") and r.get("library") is True]
    spans = [span for r in rows if (span := judged(r)) is not None]
    out: dict[str, Any] = {
        "problems": n, "correct": correct, "fraction_correct": correct / n if n else None,
        "timing_measured": bool(measured), "timed": len(measured),
        "faster_than_eager": None, "fraction_faster_than_eager": None,
        "faster_than_compile": None, "fraction_faster_than_compile": None,
        "geomean_speedup_vs_compile": None, "geomean_speedup_vs_eager": None,
        "mean_roofline_fraction": None, "roofline_problems": 0,
        "failures_count_as": 1.0, "kept_eager": len(kept), "kept_eager_problems": kept, "kept_eager_counts_as": 1.0,
        # correct, but paid less by the reward's policy (docs/reward.md): counted apart, speedups as measured
        "not_general": len(not_general), "not_general_problems": not_general,
        "library": len(library), "library_problems": library,
        "evaluator_faults": len(faults), "evaluator_fault_problems": faults,
        "evaluator_fault_attempts": sum(r.get("evaluator_faults") or 0 for r in rows),
        "attempts": sum(r.get("attempts") or 0 for r in rows), "tokens": sum(r.get("tokens") or 0 for r in rows),
        "device_s": round(sum(r.get("device_s") or 0 for r in rows), 3), "precision": precision_cell(rows),
        # dollars (agent/cost.py): over the problems with a price; those without one listed apart, never as $0
        "cost_usd": sum(r["cost_usd"] for r in rows if cost_known(r)) if any(cost_known(r) for r in rows) else None,
        "cost_priced": sum(cost_known(r) for r in rows),
        "cost_no_price_problems": [r["problem"] for r in rows if cost_cell(r) == NO_PRICE],
        "cost_no_price_tokens": sum(r.get("tokens") or 0 for r in rows if cost_cell(r) == NO_PRICE),
        "cost_not_recorded": sum(cost_cell(r) == COST_NOT_RECORDED for r in rows),
        # the evaluators' busy time against the agents' wall time, over the rows that record it (schema 5)
        "judge_s": round(sum(j for j, _ in spans), 3) if spans else None,
        "judge_share": round(sum(j for j, _ in spans) / sum(w for _, w in spans), 4) if spans else None,
    }
    if not measured or not n:
        return out
    answers = [r for r in measured if faster(r)]  # kept-eager problems: 1.0x, faster than nothing
    eager = sum(r["speedup_vs_eager"] > 1.0 for r in answers)
    compiled = sum((r.get("speedup_vs_compile") or 0) > 1.0 for r in answers)
    logs = [math.log(r["speedup_vs_compile"]) if faster(r) and (r.get("speedup_vs_compile") or 0) > 0 else 0.0
            for r in rows]
    eager_logs = [math.log(r["speedup_vs_eager"]) if faster(r) and r["speedup_vs_eager"] > 0 else 0.0 for r in rows]
    fractions = [r["roofline_fraction"] for r in measured if r.get("roofline_fraction") is not None]
    out.update(faster_than_eager=eager, fraction_faster_than_eager=eager / n, faster_than_compile=compiled,
               fraction_faster_than_compile=compiled / n, geomean_speedup_vs_compile=math.exp(sum(logs) / n),
               geomean_speedup_vs_eager=math.exp(sum(eager_logs) / n),
               mean_roofline_fraction=sum(fractions) / len(fractions) if fractions else None,
               roofline_problems=len(fractions))
    return out


def _x(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}x"


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{value:.1%}"


def speed_cells(row: dict[str, Any]) -> tuple[str, str, str]:
    """vs eager, vs torch.compile, roofline fraction: numbers, "not measured", or "-" (no kernel)."""
    if not row.get("correct"):
        return "-", "-", "-"
    if not timed(row):
        return NOT_MEASURED, NOT_MEASURED, NOT_MEASURED
    if kept_eager(row):
        return f"1.00x {KEPT_EAGER} (best {_x(row['speedup_vs_eager'])})", KEPT_EAGER, _pct(row.get("roofline_fraction"))
    compile_cell = _x(row.get("speedup_vs_compile")) if row.get("speedup_vs_compile") is not None else NOT_MEASURED
    return _x(row["speedup_vs_eager"]), compile_cell, _pct(row.get("roofline_fraction"))


def one_problem(row: dict[str, Any]) -> str:
    """A few words on one problem's outcome (progress lines)."""
    verdict = row.get("verdict") or row.get("status")
    if evaluator_fault(row):
        verdict = verdict_cell(row)
    if not row.get("correct"):
        extra = f" ({row['error']})" if row.get("error") and row.get("status") != "finished" else ""
        return f"{verdict}{extra}, {row.get('attempts') or 0} attempt(s)"
    eager, compiled, _ = speed_cells(row)
    figures = f"{eager} vs eager, {compiled} vs torch.compile" if timed(row) else "timing not measured"
    if kept_eager(row):
        figures = f"{KEPT_EAGER}: no kernel faster than PyTorch (best {_x(row['speedup_vs_eager'])} vs eager)"
    return f"ok, {figures}, {row.get('attempts') or 0} attempt(s)"


COST_NOT_RECORDED = "not recorded"


def judged(row: dict[str, Any]) -> tuple[float, float] | None:
    """(seconds the row's evaluator judged, the agent run's wall seconds), where the row records both."""
    j, wall = row.get("judge_s"), row.get("agent_wall_s")
    if isinstance(j, (int, float)) and isinstance(wall, (int, float)) and wall > 0:
        return float(j), float(wall)
    return None


def cost_known(row: dict[str, Any]) -> bool:
    return (row.get("schema") or 1) >= 4 and isinstance(row.get("cost_usd"), (int, float))


def cost_cell(row: dict[str, Any]) -> str:
    """A problem's dollars: `$0.0123`, "no price" (its model had none), "not recorded" (a row before
    schema 4), "-" (nothing ran: a crashed worker's row)."""
    if (row.get("schema") or 1) < 4:
        return COST_NOT_RECORDED
    if cost_known(row):
        return format_usd(row["cost_usd"])
    return NO_PRICE if row.get("model") else "-"


def cost_summary(h: dict[str, Any]) -> str:
    """The headline's cost in one line."""
    parts = []
    if h["cost_usd"] is not None:
        parts.append(f"{format_usd(h['cost_usd'])} over {h['cost_priced']} problem(s) with a price")
    if h["cost_no_price_problems"]:
        names = h["cost_no_price_problems"]
        parts.append(f"{NO_PRICE} for {len(names)} ({', '.join(names[:5])}{', ...' if len(names) > 5 else ''}: "
                     f"{h['cost_no_price_tokens']} tokens not in the sum)")
    if h["cost_not_recorded"]:
        parts.append(f"{COST_NOT_RECORDED} for {h['cost_not_recorded']} (rows written before costs were kept)")
    return "; ".join(parts) or "-"


def gpu_cost(row: dict[str, Any], price: float | None) -> float | None:
    """The dollars of the seconds a problem held its GPU (`device_s`, model waits included) at `price`
    per GPU-hour; None off a GPU or without a price."""
    if price is None or row.get("device_s") is None or not str(row.get("device") or "").startswith("cuda"):
        return None
    return row["device_s"] / 3600.0 * price


def gpu_cost_line(run: Run) -> str | None:
    """The headline's GPU dollars, clearly apart from the model's; None without a GPU price."""
    price = run.gpu_price_per_hour
    if price is None:
        return None
    costs = [c for c in (gpu_cost(r, price) for r in run.rows) if c is not None]
    if not costs:
        return "no GPU in this run: no GPU dollars"
    seconds = sum(r["device_s"] for r in run.rows if gpu_cost(r, price) is not None)
    return (f"{format_usd(sum(costs))} at ${price:g} per GPU-hour for {seconds:.0f} GPU-seconds held by "
            f"{len(costs)} problem(s) (model waits included; not in the model cost)")


def precision_cell(rows: list[dict[str, Any]]) -> str:
    """The rows' precision (tools/precision.py): one value, or each with its count where a resumed
    run mixed them (their speedups then compare with different baselines). A row with none (a
    crashed problem's, or one from before the setting existed) says nothing either way."""
    counts = Counter(r["precision"] for r in rows if r.get("precision"))
    if len(counts) <= 1:
        return next(iter(counts), "not recorded")
    return ", ".join(f"{name} ({n})" for name, n in sorted(counts.items())) + ": mixed, the speedups do not compare"


def device_label(run: Run) -> str:
    if run.meta.get("device") == "cpu" or (run.rows and all(r.get("device") == "cpu" for r in run.rows)):
        return "CPU s"
    return "GPU s"


def table(run: Run) -> str:
    gpu = run.gpu_price_per_hour is not None
    head = ("problem", "verdict", "vs eager", "vs compile", "roofline", "attempts", "tokens", "cost", device_label(run),
            *(("GPU $",) if gpu else ()))
    body = []
    for r in run.rows:
        eager, compiled, roof = speed_cells(r)
        seconds = "-" if r.get("device_s") is None else f"{r['device_s']:.1f}"
        dollars = gpu_cost(r, run.gpu_price_per_hour)
        body.append((r["problem"], verdict_cell(r), eager, compiled, roof, str(r.get("attempts") or 0),
                     str(r.get("tokens") or 0), cost_cell(r), seconds,
                     *((("-" if dollars is None else format_usd(dollars)),) if gpu else ())))
    widths = [max(len(line[i]) for line in [head, *body]) for i in range(len(head))]
    fmt = lambda line: "  ".join(c.ljust(w) if i < 2 else c.rjust(w) for i, (c, w) in enumerate(zip(line, widths)))  # noqa: E731
    return "\n".join(fmt(line).rstrip() for line in [head, *body])


def headline_lines(run: Run) -> list[str]:
    h = headline(run.rows)
    n = h["problems"]
    done = f"{n} problem(s)" + (f" ({len(run.missing)} more of the run not finished: not counted)" if run.missing else "")
    lines = [done, f"correct:                          {h['correct']}/{n} ({_pct(h['fraction_correct'])})",
             f"precision:                        {h['precision']}",
             f"model cost:                       {cost_summary(h)}"]
    gpu = gpu_cost_line(run)
    if gpu:
        lines.append(f"GPU cost:                         {gpu}")
    if h["judge_share"] is not None:
        lines.append(f"judging:                          {_pct(h['judge_share'])} of the agents' wall time "
                     f"({h['judge_s']:.1f} s in the evaluators: the GPUs were busy at most that long)")
    if h["evaluator_faults"]:
        lines.append(f"evaluator faults:                 {h['evaluator_faults']}/{n} never judged "
                     f"({', '.join(h['evaluator_fault_problems'])}): ratchet failed, not the model; "
                     f"counted as not correct (1.0x); rerun them")
    if h["not_general"]:
        lines.append(f"not general:                      {h['not_general']}/{n} ({', '.join(h['not_general_problems'])}): "
                     "the best kernel is specialized or leaves other sizes to torch (the reward pays half its speedup)")
    if h["library"]:
        lines.append(f"library work:                     {h['library']}/{n} ({', '.join(h['library_problems'])}): "
                     "most GPU time in library kernels the reference does not run (the reward pays no speedup)")
    if not h["timing_measured"]:
        lines += [f"faster than eager:                {NOT_MEASURED}",
                  f"faster than torch.compile:        {NOT_MEASURED}",
                  f"geomean speedup vs torch.compile: {NOT_MEASURED}",
                  f"geomean speedup vs eager:         {NOT_MEASURED}",
                  f"mean roofline fraction:           {NOT_MEASURED}",
                  "timing: not measured (no kernel was timed: a CPU run, Triton's interpreter checks correctness only)"]
        return lines
    lines += [f"faster than eager:                {h['faster_than_eager']}/{n} ({_pct(h['fraction_faster_than_eager'])})",
              f"faster than torch.compile:        {h['faster_than_compile']}/{n} ({_pct(h['fraction_faster_than_compile'])})",
              f"geomean speedup vs torch.compile: {_x(h['geomean_speedup_vs_compile'])} over all {n} problems "
              f"({FAILURE_NOTE})",
              f"geomean speedup vs eager:         {_x(h['geomean_speedup_vs_eager'])} over all {n} problems",
              f"mean roofline fraction:           {_pct(h['mean_roofline_fraction'])} "
              f"(over {h['roofline_problems']} correct timed kernel(s))"]
    if h["kept_eager"]:
        lines.append(f"kept eager:                       {h['kept_eager']}/{n} ({', '.join(h['kept_eager_problems'])}): "
                     f"no kernel faster than PyTorch; counted as 1.0x against eager, never as a slowdown")
    return lines


def text_report(run: Run) -> str:
    return "\n".join([table(run), "", *headline_lines(run)])


def json_report(run: Run) -> dict[str, Any]:
    h = headline(run.rows)
    notes = [FAILURE_NOTE]
    if h["evaluator_faults"]:
        notes.append(FAULT_NOTE)
    if h["kept_eager"]:
        notes.append(KEPT_NOTE)
    if not h["timing_measured"]:
        notes.append("timing not measured: every speed figure is null")
    if run.gpu_price_per_hour is not None:
        costs = [c for c in (gpu_cost(r, run.gpu_price_per_hour) for r in run.rows) if c is not None]
        h = {**h, "gpu_price_per_hour": run.gpu_price_per_hour, "gpu_cost_usd": sum(costs) if costs else None}
    return {"run": str(run.path), "headline": h, "missing": run.missing, "notes": notes, "problems": run.rows}


# --- the HTML page --------------------------------------------------------------------------------
