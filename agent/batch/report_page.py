"""The HTML page of a batch run's report (agent/batch/report.py computes every number it shows).

Self-contained (inline CSS and SVG, no scripts, no external assets), rendered from
agent/templates/report.html.j2 with autoescaping on. Where kernels were timed: the speedup
chart against eager, torch.compile and the roofline, and the speed tiles. Where nothing was
timed (a CPU run): no chart and no speed tile pretending to be one, but what was measured instead:
the correctness trials and input distributions the best kernels passed, their held-out outcome,
and the attempts each problem took to its first correct kernel. Each problem links to its best
file and its workspace; a problem without a kernel says why (unrecognized, an error) in the table.
"""
from __future__ import annotations

import math
import statistics
import time
from pathlib import Path
from typing import Any

import jinja2

from agent.batch.report import (FAILURE_NOTE, FAULT_NOTE, KEPT_EAGER, KEPT_NOTE, NOT_MEASURED, TEMPLATES, Run, _pct,
                                _x, cost_cell, cost_summary, device_label, gpu_cost, gpu_cost_line, evaluator_fault, headline, kept_eager,
                                speed_cells, timed, verdict_cell)
from agent.cost import NO_PRICE, format_usd


CHART = {"width": 960, "label_w": 250, "right": 130, "row_h": 28, "top": 44, "bottom": 36}


def _domain(rows: list[dict[str, Any]]) -> tuple[float, float]:
    values = [1.0]
    for r in rows:
        for v in _marks(r).values():
            if v:
                values.append(v)
    lo = 2.0 ** math.floor(math.log2(min(values) / 1.15))
    hi = 2.0 ** math.ceil(math.log2(max(values) * 1.15))
    return min(lo, 0.5), max(hi, 2.0)


def _marks(row: dict[str, Any]) -> dict[str, float | None]:
    """Positions on the chart, all as speedups against eager PyTorch (eager = 1.0): the kernel,
    torch.compile (eager time / compile time) and the roofline (eager time / the floor)."""
    if not timed(row):
        return {"kernel": None, "compile": None, "roofline": None}
    sve, svc = row["speedup_vs_eager"], row.get("speedup_vs_compile")
    compile_mark = sve / svc if svc else None
    if compile_mark is None and row.get("eager_ms") and row.get("compile_ms"):
        compile_mark = row["eager_ms"] / row["compile_ms"]
    roofline = None
    if row.get("eager_ms") and row.get("floor_ms"):
        roofline = row["eager_ms"] / row["floor_ms"]
    elif row.get("roofline_fraction") and row.get("candidate_ms") and row.get("eager_ms"):
        roofline = row["eager_ms"] / (row["candidate_ms"] * row["roofline_fraction"])
    elif row.get("roofline_fraction"):
        roofline = sve / row["roofline_fraction"]  # floor = kernel time * fraction
    return {"kernel": None if kept_eager(row) else sve, "compile": compile_mark, "roofline": roofline}


def chart(rows: list[dict[str, Any]]) -> dict[str, Any]:
    c = dict(CHART)
    lo, hi = _domain(rows)
    x0, x1 = c["label_w"], c["width"] - c["right"]

    def x(v: float) -> float:
        v = min(max(v, lo), hi)
        return round(x0 + (math.log(v) - math.log(lo)) / (math.log(hi) - math.log(lo)) * (x1 - x0), 1)

    out_rows = []
    for i, r in enumerate(rows):
        y = c["top"] + i * c["row_h"]
        m = _marks(r)
        item: dict[str, Any] = {"name": r["problem"], "y": y, "mid": y + c["row_h"] / 2, "verdict": r.get("verdict"),
                                "correct": bool(r.get("correct")), "timed": timed(r)}
        if m["kernel"] is not None:
            a, b = sorted((x(1.0), x(m["kernel"])))
            svc = r.get("speedup_vs_compile")
            item["bar"] = {"x": a, "w": max(b - a, 1.5), "y": y + 6, "h": c["row_h"] - 12,
                           "cls": "win" if (svc or 0) > 1.0 else ("gain" if m["kernel"] > 1.0 else "loss"),
                           "title": f"{r['problem']}: {_x(m['kernel'])} vs eager, {_x(svc)} vs torch.compile",
                           "label": f"{_x(m['kernel'])} / {_x(svc)}"}
        for key in ("compile", "roofline"):
            if m[key] is not None:
                item[key] = {"x": x(m[key]), "title": f"{key if key == 'roofline' else 'torch.compile'}: "
                                                      f"{_x(m[key])} vs eager"}
        if evaluator_fault(r):
            item["note"] = "never judged: evaluator fault (ratchet failed, not the model)"
        elif not item["correct"]:
            item["note"] = f"no correct kernel ({r.get('verdict')})"
        elif not item["timed"]:
            item["note"] = "correct; timing not measured"
        elif kept_eager(r):
            item["note"] = f"{KEPT_EAGER}: no kernel faster than PyTorch (best {_x(r['speedup_vs_eager'])})"
        out_rows.append(item)
    ticks = []
    v = lo
    while v <= hi * 1.0001:
        ticks.append({"x": x(v), "label": f"{v:g}x"})
        v *= 2
    height = c["top"] + len(rows) * c["row_h"] + c["bottom"]
    return {**c, "height": height, "rows": out_rows, "ticks": ticks, "eager_x": x(1.0), "x0": x0, "x1": x1,
            "axis_y": c["top"] + len(rows) * c["row_h"]}


def _file_link(path: Any) -> str | None:
    """A file:// link to a local path (a best file, a workspace), None where there is none."""
    return Path(path).absolute().as_uri() if path else None


def _heldout_cell(row: dict[str, Any]) -> str:
    """The best kernel's held-out trial: general, not general, or unchecked."""
    if not row.get("correct"):
        return "-"
    if row.get("generalizes") is True:
        return "general"
    if row.get("generalizes") is False:
        failed = [h["variant"] for h in row.get("heldout") or [] if h.get("outcome") != "ok"]
        return "not general" + (f" ({failed[0]})" if failed else "")
    return "unchecked"


def _trials_cell(row: dict[str, Any]) -> str:
    if not row.get("correct") or not row.get("trials"):
        return "-"
    kinds = sorted({str(d).split(":")[0] for d in row.get("distributions") or []})
    return f"{row['trials']}" + (f" ({', '.join(kinds)})" if kinds else "")


def _note(row: dict[str, Any]) -> str:
    """Why a problem has no kernel (unrecognized, an error...), in one short line."""
    if row.get("correct") or not row.get("error"):
        return ""
    text = str(row["error"])
    return text if len(text) <= 200 else text[:197] + "..."


def correctness_tiles(rows: list[dict[str, Any]]) -> list[tuple[str, str, str]]:
    """What a run without timing measured: general kernels, attempts to the first correct one, trials."""
    correct = [r for r in rows if r.get("correct")]
    general = sum(r.get("generalizes") is True for r in correct)
    checked = sum(r.get("generalizes") is not None for r in correct)
    firsts = [r["attempts_to_correct"] for r in correct if r.get("attempts_to_correct")]
    trials = [r["trials"] for r in correct if r.get("trials")]
    kinds = sorted({str(d).split(":")[0] for r in correct for d in r.get("distributions") or []})
    return [
        ("general (held-out sizes)", f"{general} of {checked}" if checked else "-",
         f"of {len(correct)} correct kernel(s), {checked} checked on held-out sizes"),
        ("attempts to the first correct kernel", f"{statistics.median(firsts):g}" if firsts else "-",
         f"median over {len(firsts)} problem(s)" if firsts else "no correct kernel in this run"),
        ("correctness trials passed", f"{sum(trials)}" if trials else "-",
         f"distributions: {', '.join(kinds)}" if kinds else "by the best kernels"),
        ("timing", NOT_MEASURED, "no GPU in this run: correctness only"),
    ]


def render_html(run: Run) -> str:
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(TEMPLATES), autoescape=True,
                             undefined=jinja2.StrictUndefined, trim_blocks=True, lstrip_blocks=True)
    h = headline(run.rows)
    table_rows = []
    for r in run.rows:
        eager, compiled, roof = speed_cells(r)
        table_rows.append({"name": r["problem"], "verdict": verdict_cell(r), "correct": bool(r.get("correct")),
                           "fault": evaluator_fault(r), "best_link": _file_link(r.get("best_path")),
                           "workspace_link": _file_link(r.get("workspace")),
                           "eager": eager, "compile": compiled, "roofline": roof, "attempts": r.get("attempts") or 0,
                           "first_correct": r.get("attempts_to_correct") or "-", "trials": _trials_cell(r),
                           "heldout": _heldout_cell(r), "note": _note(r), "tokens": r.get("tokens") or 0,
                           "cost": cost_cell(r),
                           "seconds": "-" if r.get("device_s") is None else f"{r['device_s']:.1f}"})
    tiles = [("correct", _pct(h["fraction_correct"]), f"{h['correct']} of {h['problems']}"),
             ("precision", h["precision"], "the baselines' float32 arithmetic"),
             ("model cost", format_usd(h["cost_usd"]) if h["cost_usd"] is not None else NO_PRICE, cost_summary(h))]
    if run.gpu_price_per_hour is not None:  # `ratchet report --gpu-price-per-hour`: apart from the model's dollars
        held = [c for c in (gpu_cost(r, run.gpu_price_per_hour) for r in run.rows) if c is not None]
        tiles.append(("GPU cost (time held)", format_usd(sum(held)) if held else "-", gpu_cost_line(run) or ""))
    if h["timing_measured"]:
        tiles += [("faster than eager", _pct(h["fraction_faster_than_eager"]), f"{h['faster_than_eager']} of {h['problems']}"),
                  ("faster than torch.compile", _pct(h["fraction_faster_than_compile"]),
                   f"{h['faster_than_compile']} of {h['problems']}"),
                  ("geomean vs torch.compile", _x(h["geomean_speedup_vs_compile"]), "failures count as 1.0x"),
                  ("geomean vs eager", _x(h["geomean_speedup_vs_eager"]),
                   f"kept eager: {h['kept_eager']} (1.0x)" if h["kept_eager"] else "failures count as 1.0x"),
                  ("mean roofline fraction", _pct(h["mean_roofline_fraction"]),
                   f"over {h['roofline_problems']} timed kernel(s)")]
    else:
        tiles += correctness_tiles(run.rows)
    settings = run.meta.get("settings") or {}
    return env.get_template("report.html.j2").render(
        title=f"ratchet batch report: {Path(run.meta.get('suite') or run.path).name}",
        run_path=str(run.path), suite=run.meta.get("suite") or "", model=settings.get("model") or "",
        generated=time.strftime("%Y-%m-%d %H:%M:%S"), tiles=tiles, headline=h,
        chart=chart(run.rows) if h["timing_measured"] else None,
        rows=table_rows, missing=run.missing, cost=cost_summary(h), failure_note=FAILURE_NOTE, seconds_label=device_label(run),
        faults=h["evaluator_fault_problems"], fault_note=FAULT_NOTE,
        kept=h["kept_eager_problems"], kept_note=KEPT_NOTE,
        not_measured=NOT_MEASURED)


def write_html(run: Run, path: Path | None = None) -> Path:
    path = Path(path) if path else run.path / "report.html"
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(render_html(run))
    tmp.replace(path)
    return path
