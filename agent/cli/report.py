"""`ratchet report RUN`: the suite table and headline numbers of a batch run, and its HTML page.

RUN is a batch run directory (`ratchet batch --out DIR`) or its results.jsonl. The table and the
headline go to stdout (one JSON object with --json); the HTML page (self-contained: inline CSS
and SVG) goes to RUN/report.html, or --html PATH (with --json, only when --html names it). Exit codes: 0 done, 2 no such run.
"""
from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

from agent.cli.checks import UsageError
from agent.cli.exit_codes import EXIT_OK


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("report", help="the suite table, headline numbers and HTML page of a batch run",
                              description=__doc__.split("\n\n")[0])
    p.add_argument("run", metavar="RUN", help="a batch run directory, or its results.jsonl")
    p.add_argument("--json", action="store_true", help="print one JSON object (headline, notes, rows) on stdout")
    p.add_argument("--html", metavar="PATH", help="where to write the HTML page (default RUN/report.html)")
    p.add_argument("--no-html", action="store_true", help="write no HTML page")
    p.add_argument("--gpu-price-per-hour", metavar="DOLLARS", type=float,
                   help="also show GPU dollars: the seconds each problem held its GPU at this price per GPU-hour "
                        "(none is built in; docs/batch.md)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from agent.batch.report import ReportError, json_report, load_run, text_report
    from agent.batch.report_page import write_html  # jinja2

    try:
        report = load_run(Path(args.run))
    except ReportError as exc:
        raise UsageError(str(exc)) from None
    price = args.gpu_price_per_hour
    if price is not None and not (math.isfinite(price) and price >= 0):
        raise UsageError(f"--gpu-price-per-hour {price:g}: expected dollars per GPU-hour, 0 or more")
    report.gpu_price_per_hour = price
    if args.json:
        print(json.dumps(json_report(report)))
    else:
        print(text_report(report))
    if not args.no_html and (args.html or not args.json):  # --json alone answers on stdout and writes nothing
        target = Path(args.html) if args.html else report.path / "report.html"
        try:
            path = write_html(report, target)
        except OSError as exc:
            raise UsageError(f"cannot write {target}: {exc.strerror or exc}") from None
        print(f"report: {path}", file=sys.stderr)
    return EXIT_OK
