"""`ratchet suite check DIR`: flag problems that cannot tell a good kernel from a bad one.

Degenerate problems (constant or input-independent outputs, outputs equal to an input, as ReLU
of non-negative inputs is), problems too fast to time reliably (on a GPU; on the CPU this
cannot be judged and the report says so), near-duplicate problems, and broken problem files (a
syntax error, part of the contract missing: see agent/suite/check.py).
Problem code runs only in the evaluator's reference worker. A table goes to stdout, or with
--json one JSON object per problem (JSON lines). Exit codes: 0 nothing flagged, 1 at least one
problem flagged (an error or a warning), 2 usage error.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

from agent.batch.scale import cpu_scale, scale_line

from agent.cli.checks import UsageError, check_device
from agent.suite.check import DEFAULT_MIN_EAGER_MS, DEFAULT_SIMILARITY, check_suite
from agent.cli.exit_codes import EXIT_FLAGGED, EXIT_OK


def register(subparsers: argparse._SubParsersAction) -> None:
    suite = subparsers.add_parser("suite", help="curate a problem suite")
    sub = suite.add_subparsers(dest="suite_command", required=True, metavar="SUBCOMMAND")
    p = sub.add_parser("check", help="flag degenerate, too-fast and near-duplicate problems",
                       description=__doc__.split("\n\n")[0])
    p.add_argument("directory", metavar="DIR", help="directory of problem files (searched recursively)")
    p.add_argument("--json", action="store_true", help="one JSON object per problem (JSON lines)")
    p.add_argument("--device", metavar="DEV", help="where the reference runs (default: cuda:0 when there is a GPU, else cpu)")
    p.add_argument("--min-eager-ms", type=float, default=DEFAULT_MIN_EAGER_MS, metavar="MS",
                   help=f"on a GPU, flag problems whose eager time is below this (default {DEFAULT_MIN_EAGER_MS})")
    p.add_argument("--similarity", type=float, default=DEFAULT_SIMILARITY, metavar="R",
                   help=f"flag pairs of problems whose normalized code is at least this similar (default {DEFAULT_SIMILARITY})")
    p.add_argument("--jobs", type=int, default=2, metavar="N", help="problems probed at once (default 2)")
    p.add_argument("--entry", default="Model", metavar="CLASS", help="the reference class (default Model)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    directory = Path(args.directory)
    if not directory.is_dir():
        raise UsageError(f"{directory}: no such directory")
    if not 0 < args.similarity <= 1:
        raise UsageError("--similarity must be in (0, 1]")
    if args.jobs < 1:
        raise UsageError(f"--jobs {args.jobs}: expected at least 1")
    from tools.env import resolve_device

    args.device = check_device(args.device) or resolve_device(None)
    if args.device == "cpu":  # as `batch` does: the bundled suite's GPU sizes filled 24 GB and were killed, silently
        scaled = cpu_scale(sorted(directory.rglob("*.py")), os.environ)
        if scaled:
            os.environ.update(scaled)  # the reference workers started below read it
            print(scale_line(directory, "suite check"), file=sys.stderr)
    report = check_suite(directory, device=args.device, min_eager_ms=args.min_eager_ms, similarity=args.similarity,
                         jobs=args.jobs, entry=args.entry)
    if args.json:
        for problem in report.problems:
            print(json.dumps(problem.to_dict()))
    else:
        print(render_table(report))
    return EXIT_FLAGGED if report.flagged else EXIT_OK


def render_table(report) -> str:
    lines = []
    width = max([len(p.name) for p in report.problems] + [7])
    for p in report.problems:
        shown = [f for f in p.flags if f.severity != "info"] or ([] if p.status == "checked" else p.flags[:1])
        if not shown:
            lines.append(f"{p.name:<{width}}  ok")
            continue
        for i, flag in enumerate(shown):
            lines.append(f"{p.name if i == 0 else '':<{width}}  {flag.severity:<7}  {flag.kind}: {flag.detail}")
    checked = [p for p in report.problems if p.status != "skipped"]
    notes = {f.detail.split(";")[0] for p in checked for f in p.flags if f.kind == "timing-unjudged" and f.severity == "info"}
    lines.append(f"{len(report.flagged)} of {len(checked)} problem(s) flagged in {report.directory}"
                 + (f"; timing: {next(iter(notes))}" if notes else ""))
    return "\n".join(lines)
