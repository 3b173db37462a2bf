"""`ratchet report`: the suite figures checked against values worked out by hand from synthetic
rows, the "not measured" wording of CPU runs, and the HTML page with its chart."""
from __future__ import annotations

import json
import math
import re
from html.parser import HTMLParser
from pathlib import Path

import pytest

from agent.cli import main
from agent.batch.report import headline, load_run
from agent.batch.report_page import render_html
from helpers_batch import row, write_run


# eager 1.0 ms for every problem, so candidate = 1/eager-speedup ms; the floor is candidate * fraction
GPU_ROWS = [
    row("1_fast", eager=2.0, compile=1.5, roofline=0.5, eager_ms=1.0, compile_ms=0.75, candidate_ms=0.5, floor_ms=0.25),
    row("2_slow", eager=0.8, compile=0.5, roofline=0.2, eager_ms=1.0, compile_ms=0.625, candidate_ms=1.25, floor_ms=0.25),
    row("3_wrong", correct=False, attempts=20),
    row("4_faster", eager=4.0, compile=2.0, roofline=0.6, eager_ms=1.0, compile_ms=0.5, candidate_ms=0.25, floor_ms=0.15),
    row("5_crashed", correct=False, verdict="crashed", status="crashed"),
]


def test_headline_figures_by_hand(tmp_path, capsys):
    run = write_run(tmp_path, GPU_ROWS)
    h = headline(load_run(run).rows)
    assert h["problems"] == 5 and h["correct"] == 3 and h["fraction_correct"] == pytest.approx(0.6)
    assert h["faster_than_eager"] == 2 and h["fraction_faster_than_eager"] == pytest.approx(0.4)  # 1_fast, 4_faster
    assert h["faster_than_compile"] == 2 and h["fraction_faster_than_compile"] == pytest.approx(0.4)
    # geometric mean over all five: the two failures count as 1.0x, and so does 2_slow (0.8x vs eager:
    # kept eager, the reference stays the answer; tests/loop/test_kept_eager.py)
    assert h["geomean_speedup_vs_compile"] == pytest.approx((1.5 * 1.0 * 1.0 * 2.0 * 1.0) ** (1 / 5))
    assert h["geomean_speedup_vs_compile"] == pytest.approx(3.0 ** 0.2)
    assert h["kept_eager"] == 1 and h["kept_eager_problems"] == ["2_slow"]
    assert h["mean_roofline_fraction"] == pytest.approx((0.5 + 0.2 + 0.6) / 3)
    assert h["tokens"] == 5000 and h["attempts"] == 4 * 4 + 20

    assert main(["report", str(run)]) == 0
    text = capsys.readouterr().out
    assert "geomean speedup vs torch.compile: 1.25x over all 5 problems" in text
    assert "count as 1.0x" in text
    assert "correct:                          3/5 (60.0%)" in text
    assert "faster than torch.compile:        2/5 (40.0%)" in text
    assert "mean roofline fraction:           43.3%" in text
    table = {line.split()[0]: line.split() for line in text.splitlines()[1:6]}
    assert table["1_fast"][1:5] == ["ok", "2.00x", "1.50x", "50.0%"]
    assert table["3_wrong"][1:6] == ["incorrect", "-", "-", "-", "20"]
    assert table["4_faster"][-1] == "60.0"

    page = run / "report.html"
    before = page.stat().st_mtime_ns if page.exists() else None
    assert main(["report", str(run), "--json"]) == 0  # issue 37: --json alone answers and writes nothing
    assert (page.stat().st_mtime_ns if page.exists() else None) == before
    data = json.loads(capsys.readouterr().out)
    assert data["headline"]["geomean_speedup_vs_compile"] == pytest.approx(3.0 ** 0.2)
    assert data["headline"]["failures_count_as"] == 1.0 and any("1.0x" in n for n in data["notes"])
    assert [p["problem"] for p in data["problems"]] == [r["problem"] for r in GPU_ROWS]


def test_the_headline_names_the_runs_precision_and_a_mix(tmp_path, capsys):
    assert headline(GPU_ROWS)["precision"] == "not recorded"  # rows from before the setting
    fp32 = [{**r, "precision": "fp32"} for r in GPU_ROWS[:4]] + GPU_ROWS[4:]  # a crashed problem's row has none
    run = write_run(tmp_path, fp32)
    assert main(["report", str(run), "--no-html"]) == 0
    assert "precision:                        fp32\n" in capsys.readouterr().out
    mixed = fp32[:3] + [{**fp32[3], "precision": "tf32"}]  # a batch resumed with --precision tf32
    assert headline(mixed)["precision"] == "fp32 (3), tf32 (1): mixed, the speedups do not compare"


def test_latest_row_wins_and_unfinished_problems_are_named(tmp_path):
    rows = [row("1_a", correct=False, status="model_error"), row("1_a", eager=3.0, compile=3.0, roofline=0.9)]
    run = load_run(write_run(tmp_path, rows, problems=["1_a", "2_never"]))
    assert [r["problem"] for r in run.rows] == ["1_a"] and run.missing == ["2_never"]
    h = headline(run.rows)
    assert h["correct"] == 1 and h["geomean_speedup_vs_compile"] == pytest.approx(3.0)


def test_cpu_run_says_not_measured(tmp_path, capsys):
    rows = [row("1_a", measured=False, device="cpu"), row("2_b", correct=False, device="cpu")]
    run = write_run(tmp_path, rows, device="cpu")
    h = headline(load_run(run).rows)
    assert h["timing_measured"] is False and h["geomean_speedup_vs_compile"] is None
    assert h["fraction_faster_than_eager"] is None and h["mean_roofline_fraction"] is None
    assert main(["report", str(run)]) == 0
    text = capsys.readouterr().out
    assert "geomean speedup vs torch.compile: not measured" in text and "faster than eager:                not measured" in text
    assert re.search(r"1_a\s+ok\s+not measured\s+not measured\s+not measured", text)
    assert not re.search(r"\d\.\d\dx", text)  # no speedup invented anywhere
    html = (run / "report.html").read_text()
    assert "not measured" in html and not re.search(r"\d\.\d\dx", html)
    assert "CPU s" in text


def test_a_cpu_runs_page_shows_what_was_measured(tmp_path):
    """No chart and no speed tile where nothing was timed: the trials and distributions the best
    kernels passed, their held-out outcome, the attempts to the first correct kernel, a link to each
    best file and workspace, and why a problem has no kernel."""
    best = tmp_path / "ws" / "1_a" / "best" / "candidate.py"
    rows = [row("1_a", measured=False, device="cpu", best_path=str(best), workspace=str(best.parents[1]), trials=5,
                distributions=["problem", "shifted", "signed:0", "stress:1000"], generalizes=True, attempts_to_correct=2,
                heldout=[{"variant": "n=33", "outcome": "ok"}]),
            row("2_b", measured=False, device="cpu", trials=3, distributions=["problem"], generalizes=False,
                attempts_to_correct=4, heldout=[{"variant": "n=7", "outcome": "incorrect"}]),
            row("3_c", correct=False, verdict="unrecognized", status="unrecognized", device="cpu", attempts=0,
                error="the built-in policy recognizes no pattern in 3_c.py (aten.sort.default); nothing attempted")]
    run = write_run(tmp_path, rows, device="cpu", problems=["1_a", "2_b", "3_c", "4_d"])
    html = render_html(load_run(run))
    assert "<svg" not in html and "No speed chart" in html and not re.search(r"\d\.\d\dx", html)
    tiles = {name: value for value, name in re.findall(r'<div class="value">([^<]*)</div><div class="name">([^<]*)</div>', html)}
    assert tiles["general (held-out sizes)"] == "1 of 2"
    assert tiles["attempts to the first correct kernel"] == "3"  # the median of 2 and 4
    assert tiles["correctness trials passed"] == "8" and tiles["timing"] == "not measured"
    assert "distributions: problem, shifted, signed, stress" in html
    assert f'<a href="{best.as_uri()}">1_a</a>' in html and f'href="{best.parents[1].as_uri()}">workspace</a>' in html
    assert "<td>5 (problem, shifted, signed, stress)</td><td>general</td><td>2</td>" in html
    assert "<td>not general (n=7)</td><td>4</td>" in html
    assert re.search(r'unrecognized<div class="why">the built-in policy recognizes no pattern in 3_c\.py', html)
    # the notes under the table: sentences with spaces between them
    assert "in Triton's interpreter). Not finished, not counted: 4_d. Suite: /x/suite." in html


class SvgCollector(HTMLParser):
    """The chart's per-problem groups and what each holds (tag, class)."""

    def __init__(self):
        super().__init__()
        self.groups: dict[str, list[tuple[str, str]]] = {}
        self.current: str | None = None
        self.depth = 0
        self.tags: list[str] = []
        self.external: list[str] = []

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        self.tags.append(tag)
        for key in ("src", "href"):
            if a.get(key):
                self.external.append(a[key])
        if tag == "g" and "problem" in (a.get("class") or "").split():
            self.current, self.depth = a["data-problem"], 0
            self.groups[self.current] = []
        elif self.current is not None:
            if tag == "g":
                self.depth += 1
            self.groups[self.current].append((tag, a.get("class") or ""))

    def handle_endtag(self, tag):
        if tag == "g" and self.current is not None:
            if self.depth == 0:
                self.current = None
            else:
                self.depth -= 1


def test_html_page_has_a_chart_row_per_problem(tmp_path):
    rows = [*GPU_ROWS, row("6_<b>&amp", eager=1.2, compile=0.9, roofline=0.1, eager_ms=2.0, floor_ms=0.2)]
    assert main(["report", str(write_run(tmp_path, rows)), "--no-html"]) == 0
    html = render_html(load_run(tmp_path / "run"))
    parser = SvgCollector()
    parser.feed(html)
    assert set(parser.groups) == {r["problem"] for r in rows}
    assert html.count("<svg") == 1 and "<script" not in html and not parser.external and "<style>" in html
    assert "6_&lt;b&gt;&amp;amp" in html  # autoescaped
    for r in rows:
        items = parser.groups[r["problem"]]
        classes = [(tag, cls.split()[0] if cls else "") for tag, cls in items]
        if r["problem"] == "2_slow":  # slower than eager: kept eager, no bar, a note (tests/loop/test_kept_eager.py)
            assert ("rect", "bar") not in classes and ("text", "note") in classes and ("line", "compile") in classes
        elif r["correct"]:
            assert ("rect", "bar") in classes and ("line", "compile") in classes and ("line", "roofline") in classes, r
        else:
            assert ("rect", "bar") not in classes and ("text", "note") in classes, r
    # geometry: the bar of 4_faster reaches x(4.0), its compile tick sits at x(2.0), its roofline at x(1/0.15)
    bar = re.search(r'data-problem="4_faster">.*?<rect class="bar win" x="([\d.]+)" y="[\d.]+" width="([\d.]+)"', html, re.S)
    compile_x = float(re.search(r'data-problem="4_faster">.*?<line class="compile" x1="([\d.]+)"', html, re.S).group(1))
    roof_x = float(re.search(r'data-problem="4_faster">.*?<line class="roofline" x1="([\d.]+)"', html, re.S).group(1))
    eager_x = float(re.search(r'<line class="eager" x1="([\d.]+)"', html).group(1))
    start, width = float(bar.group(1)), float(bar.group(2))
    assert start == pytest.approx(eager_x)
    unit = width / math.log(4.0)  # pixels per e-fold of speedup (log scale)
    assert compile_x - eager_x == pytest.approx(unit * math.log(2.0), abs=0.2)
    assert roof_x - eager_x == pytest.approx(unit * math.log(1 / 0.15), abs=0.2)
    # the slower-than-eager kernel is not drawn as a loss: the problem is kept eager (1.0x)
    assert re.search(r'data-problem="2_slow">.*?kept eager: no kernel faster than PyTorch \(best 0\.80x\)', html, re.S)
    assert "geomean vs torch.compile" in html and f"{(1.5 * 1.0 * 2.0 * 0.9) ** (1 / 6):.2f}x" == "1.18x" in html


def test_report_of_no_run_is_a_usage_error(tmp_path, capsys):
    assert main(["report", str(tmp_path)]) == 2
    assert "no results.jsonl" in capsys.readouterr().err


def test_an_evaluator_fault_is_counted_apart(tmp_path, capsys):
    """A problem whose every attempt was an evaluator fault (verdict error, from a record built as
    the evaluator builds one) was never judged: shown as a fault, neither correct nor incorrect,
    and kept in the denominators as not correct, so a fault can never raise a figure."""
    from tools.record import Result, Verdict

    fault = Result(verdict=Verdict.ERROR, message="ratchet's evaluator failed (ReferenceLost: died twice)")
    rows = [*GPU_ROWS, row("6_fault", correct=False, verdict=fault.to_dict()["verdict"], evaluator_faults=3,
                           status="error", error="every attempt (3) ended in an evaluator fault (verdict error)")]
    run = write_run(tmp_path, rows)
    h = headline(load_run(run).rows)
    assert h["evaluator_faults"] == 1 and h["evaluator_fault_problems"] == ["6_fault"]
    assert h["evaluator_fault_attempts"] == 3
    assert h["problems"] == 6 and h["correct"] == 3 and h["fraction_correct"] == pytest.approx(3 / 6)
    assert h["geomean_speedup_vs_compile"] == pytest.approx((1.5 * 1.0 * 2.0) ** (1 / 6))  # 2_slow kept eager
    assert main(["report", str(run)]) == 0
    text = capsys.readouterr().out
    fault_line = next(line for line in text.splitlines() if line.startswith("6_fault"))
    assert "error (evaluator fault)" in fault_line and "incorrect" not in fault_line
    assert "evaluator faults:                 1/6 never judged (6_fault): ratchet failed, not the model" in text
    assert "5_crashed" in text and "evaluator faults" not in next(l for l in text.splitlines() if l.startswith("5_crashed"))
    assert main(["report", str(run), "--json", "--no-html"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["headline"]["evaluator_faults"] == 1 and any("evaluator fault" in n for n in data["notes"])
    html = render_html(load_run(run))
    assert 'class="fault">error (evaluator fault)' in html and "never judged: evaluator fault" in html


def test_kernels_the_reward_pays_less_are_counted_apart(tmp_path, capsys):
    """A best kernel that is not general or is library work (docs/reward.md) is correct, and named."""
    rows = [{**GPU_ROWS[0], "generalizes": False}, {**GPU_ROWS[3], "library": True}, GPU_ROWS[1],
            {**GPU_ROWS[2], "library": True}]  # 3_wrong: not correct, not counted
    h = headline(rows)
    assert h["not_general"] == 1 and h["not_general_problems"] == ["1_fast"]
    assert h["library"] == 1 and h["library_problems"] == ["4_faster"]
    assert main(["report", str(write_run(tmp_path, rows)), "--no-html"]) == 0
    text = capsys.readouterr().out
    assert "not general:                      1/4 (1_fast)" in text and "library work:                     1/4 (4_faster)" in text


def test_cost_columns_no_price_and_rows_before_costs(tmp_path, capsys):
    """Row schema 4's `cost_usd` beside tokens and device seconds: summed over the problems with a
    price; a model without one reads "no price" (never $0) and is listed apart with its tokens; the
    built-in policy's $0 is a price; a row before schema 4 reads "not recorded"; a crashed worker's, "-"."""
    rows = [row("1_priced", schema=4, cost_usd=0.0125, model="m", tokens=4000),
            row("2_unpriced", schema=4, cost_usd=None, model="other", tokens=1500),
            row("3_builtin", schema=4, cost_usd=0.0, model="builtin", tokens=0),
            row("4_old", model="m"),  # schema 1: written before costs were kept
            row("5_crashed", schema=4, correct=False, verdict="crashed", status="crashed", tokens=0)]
    run = write_run(tmp_path, rows)
    h = headline(load_run(run).rows)
    assert h["cost_usd"] == pytest.approx(0.0125) and h["cost_priced"] == 2
    assert h["cost_no_price_problems"] == ["2_unpriced"] and h["cost_no_price_tokens"] == 1500
    assert h["cost_not_recorded"] == 1
    assert main(["report", str(run)]) == 0
    text = capsys.readouterr().out
    lines = text.splitlines()
    assert lines[0].split()[-4:] == ["tokens", "cost", "GPU", "s"]  # cost next to tokens and GPU seconds
    table = {line.split()[0]: line for line in lines[1:6]}
    assert "$0.0125" in table["1_priced"] and "no price" in table["2_unpriced"] and "$0" in table["3_builtin"]
    assert "not recorded" in table["4_old"] and table["5_crashed"].split()[-2] == "-"
    assert ("model cost:                       $0.0125 over 2 problem(s) with a price; no price for 1 (2_unpriced: "
            "1500 tokens not in the sum); not recorded for 1") in text
    html = render_html(load_run(run))
    assert "<th>cost</th>" in html and "<td>$0.0125</td>" in html and "<td>no price</td>" in html
    assert "<td>not recorded</td>" in html and "<div class=\"name\">model cost</div>" in html


def test_gpu_dollars_only_with_a_gpu_price_and_apart_from_the_model_cost(tmp_path, capsys):
    rows = [row("1_a", schema=4, cost_usd=0.01, model="m", device_s=120.0),
            row("2_b", schema=4, cost_usd=0.02, model="m", device_s=80.0),
            row("3_cpu", schema=4, cost_usd=0.0, model="builtin", device="cpu", device_s=50.0)]
    run = write_run(tmp_path, rows)
    assert main(["report", str(run), "--no-html"]) == 0
    assert "GPU $" not in capsys.readouterr().out  # no price given: no GPU dollars
    assert main(["report", str(run), "--no-html", "--gpu-price-per-hour", "2.1"]) == 0
    text = capsys.readouterr().out
    assert text.splitlines()[0].split()[-2:] == ["GPU", "$"]
    assert ("GPU cost:                         $0.1167 at $2.1 per GPU-hour for 200 GPU-seconds held by 2 problem(s) "
            "(model waits included; not in the model cost)") in text
    assert "model cost:                       $0.03 over 3 problem(s) with a price" in text
    assert main(["report", str(run), "--json", "--gpu-price-per-hour", "2.1"]) == 0
    assert json.loads(capsys.readouterr().out)["headline"]["gpu_cost_usd"] == pytest.approx(200 / 3600 * 2.1)
    assert main(["report", str(run), "--gpu-price-per-hour", "-1"]) == 2
    assert "--gpu-price-per-hour -1: expected dollars per GPU-hour" in capsys.readouterr().err
    load = load_run(run)
    load.gpu_price_per_hour = 2.1
    assert "GPU cost (time held)" in render_html(load)


def test_the_evaluators_share_of_the_agents_wall_time(tmp_path, capsys):
    """Row schema 5: each run's judging seconds; the headline sums them against the runs' wall
    time, over the rows that record both (issue 40: how busy the GPUs were, at most)."""
    rows = [row("1_a", schema=5, judge_s=30.0, agent_wall_s=100.0, judge_share=0.3),
            row("2_b", schema=5, judge_s=10.0, agent_wall_s=100.0, judge_share=0.1),
            row("3_old", schema=4)]
    run = write_run(tmp_path, rows)
    h = headline(load_run(run).rows)
    assert h["judge_s"] == 40.0 and h["judge_share"] == pytest.approx(0.2)
    assert main(["report", str(run), "--no-html"]) == 0
    assert ("judging:                          20.0% of the agents' wall time (40.0 s in the evaluators: the GPUs "
            "were busy at most that long)") in capsys.readouterr().out
    assert headline([row("3_old", schema=4)])["judge_share"] is None  # rows before schema 5: not known
