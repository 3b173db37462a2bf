"""`ratchet log`, `ratchet show` and `ratchet best`: read a problem's git workspace.

PROBLEM is the problem file (its workspace is found by name and content hash) or the
workspace's directory name. These commands only read: they take no lock and repair nothing.
Where the best is not faster than eager PyTorch beyond noise (agent/loop/kept_eager.py), `ratchet
best` writes nothing and exits EXIT_KEPT_EAGER, or with --reference writes the reference as ModelNew.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from typing import TYPE_CHECKING

from agent.cli.checks import UsageError
from agent.loop.kept_eager import MODEL_NEW, kept_eager, no_faster_line, reference_as_model_new
from agent.cost import NO_PRICE, format_usd
from agent.workspace.attempt import Attempt, format_ms
from agent.workspace.lock import atomic_write
from agent.cli.exit_codes import EXIT_KEPT_EAGER, EXIT_OK

if TYPE_CHECKING:  # agent.workspace.root imports git: only when a command reads a workspace
    from agent.workspace.root import ProblemRepo


def register(subparsers: argparse._SubParsersAction) -> None:
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("problem", metavar="PROBLEM", help="problem file, or the workspace's directory name")
    common.add_argument("--workspace", metavar="DIR",
                        help="workspace root (default: $RATCHET_WORKSPACE, else ./workspaces)")

    log = subparsers.add_parser("log", parents=[common], help="list a problem's attempts; * marks the best")
    shape = log.add_mutually_exclusive_group()
    shape.add_argument("--json", action="store_true", help="one JSON object per attempt (JSON lines)")
    shape.add_argument("--tree", action="store_true",
                       help="the attempts as the search made them: each under the attempt its conversation answered")
    log.set_defaults(func=run_log)

    show = subparsers.add_parser("show", parents=[common], help="print an attempt's source and result record")
    which = show.add_mutually_exclusive_group()
    which.add_argument("attempt", metavar="ATTEMPT", nargs="?", type=int, help="attempt number (default: the latest)")
    which.add_argument("--best", action="store_true", help="the best attempt")
    show.add_argument("--json", action="store_true", help="one JSON object: attempt, source, result")
    show.set_defaults(func=run_show)

    best = subparsers.add_parser("best", parents=[common], help="write the best ModelNew source (a drop-in file)",
                                 description="Write the best attempt's ModelNew source. When no kernel is faster than "
                                             "PyTorch (the best and eager both timed, the best not faster beyond "
                                             "noise) nothing is written and the exit code is 14, unless --reference "
                                             "(docs/workspace.md).")
    best.add_argument("-o", "--output", metavar="FILE", help="write to FILE instead of stdout")
    best.add_argument("--reference", action="store_true",
                      help="when no kernel is faster than PyTorch, write the problem's reference as a drop-in "
                           "ModelNew instead (exit 0)")
    best.add_argument("--entry", metavar="CLASS", default="Model",
                      help="the reference class that --reference makes ModelNew of (default Model)")
    best.set_defaults(func=run_best)


def _open(args: argparse.Namespace) -> ProblemRepo:
    from agent.workspace.root import Workspace, WorkspaceError, resolve_root

    try:
        return Workspace(resolve_root(args.workspace)).open_existing(args.problem)
    except WorkspaceError as exc:
        raise UsageError(str(exc)) from None


def _fmt(value: float | None, spec: str, suffix: str = "") -> str:
    return "n/a" if value is None else f"{value:{spec}}{suffix}"


def run_log(args: argparse.Namespace) -> int:
    with _open(args) as repo:
        attempts = repo.attempts()
    if args.json:
        for a in attempts:
            print(json.dumps(a.to_dict()))
        return EXIT_OK
    if args.tree:
        from agent.workspace.tree import tree_lines

        print("\n".join(tree_lines(attempts)) if attempts else f"no attempts in {repo.path}")
        return EXIT_OK
    header = ("", "#", "verdict", "vs eager", "vs compile", "median ms", "95% interval", "roofline", "precision", "tokens",
              "cost", "run cost", "eval s", "model", "commit")
    rows = [header]
    for a in attempts:
        interval = ("n/a" if not a.timed or a.ci_low_ms is None or a.ci_high_ms is None
                    else f"{format_ms(a.ci_low_ms)}-{format_ms(a.ci_high_ms)}")
        rows.append(("*" if a.is_best else "", str(a.number), a.verdict.value, _fmt(a.speedup_vs_eager, ".2f", "x"),
                     _fmt(a.speedup_vs_compile, ".2f", "x"), format_ms(a.median_ms) if a.timed else "n/a", interval,
                     _fmt(a.roofline_fraction and a.roofline_fraction * 100, ".1f", "%"), a.precision or "n/a",
                     "n/a" if a.tokens is None else str(a.tokens), a.cost_cell(), a.cost_cell("run_cost_usd"),
                     _fmt(a.eval_s, ".1f"), a.model or "n/a", a.sha[:10]))
    widths = [max(len(r[i]) for r in rows) for i in range(len(header))]
    right = {1, 3, 4, 5, 7, 9, 10, 11, 12}
    for row in rows:
        cells = [c.rjust(w) if i in right else c.ljust(w) for i, (c, w) in enumerate(zip(row, widths))]
        print("  ".join(cells).rstrip())
    best = next((a for a in attempts if a.is_best), None)
    if attempts:
        print(cost_line(attempts))
    print(f"{len(attempts)} attempt(s) in {repo.path}; "
          + (f"best: attempt {best.number} ({best.summary()})" if best else "no correct attempt yet"))
    return EXIT_OK


def cost_line(attempts: list[Attempt]) -> str:
    """The problem's cost: each run's (its last attempt's Ratchet-Run-Cost-Usd: every turn of the run
    up to it) and their sum, with tokens and evaluation seconds; "no price" where a run had none."""
    runs: dict[str, Attempt] = {}
    for a in attempts:
        runs[a.run_id or "n/a"] = a  # attempts come in commit order: the last one of each run stays
    priced = [a.run_cost_usd for a in runs.values() if a.tokens is not None and a.run_cost_usd is not None]
    unpriced = [run for run, a in runs.items() if a.tokens is not None and a.run_cost_usd is None]
    unknown = [run for run, a in runs.items() if a.tokens is None]
    parts = []
    if priced or not (unpriced or unknown):
        parts.append(format_usd(sum(priced)))
    if unpriced:
        parts.append(f"{NO_PRICE} for {len(unpriced)} run(s) ({', '.join(unpriced[:3])})")
    if unknown:
        parts.append(f"n/a for {len(unknown)} run(s) (committed before costs were recorded)")
    tokens = sum(a.tokens or 0 for a in attempts)
    seconds = sum(a.eval_s or 0.0 for a in attempts)
    per_run = "" if len(runs) < 2 else " (" + "; ".join(f"run {run}: {a.cost_cell('run_cost_usd')}"
                                                       for run, a in runs.items()) + ")"
    return (f"cost over {len(runs)} run(s): {' + '.join(parts)}{per_run}; {tokens} tokens in the attempts' turns; "
            f"{seconds:.1f} s evaluating")


def _pick(repo: ProblemRepo, args: argparse.Namespace) -> Attempt:
    if args.best:
        attempt = repo.best()
        if attempt is None:
            raise UsageError(f"workspace {repo.name} has no correct attempt yet")
    elif args.attempt is not None:
        attempt = repo.attempt(args.attempt)
        if attempt is None:
            raise UsageError(f"workspace {repo.name} has no attempt {args.attempt}")
    else:
        attempt = repo.latest()
        if attempt is None:
            raise UsageError(f"workspace {repo.name} has no attempts yet")
    return attempt


def run_show(args: argparse.Namespace) -> int:
    with _open(args) as repo:
        attempt = _pick(repo, args)
        source, record = repo.source(attempt), repo.record(attempt)
    if args.json:
        print(json.dumps({"attempt": attempt.to_dict(), "source": source, "result": record}))
        return EXIT_OK
    best = " (best)" if attempt.is_best else ""
    print(f"# attempt {attempt.number}{best}: {attempt.summary()}; precision {attempt.precision or 'n/a'}, "
          f"model {attempt.model or 'n/a'}, tokens {'n/a' if attempt.tokens is None else attempt.tokens}, "
          f"cost {attempt.cost_cell()}, run {attempt.run_id or 'n/a'}, commit {attempt.sha}")
    print("# ---- candidate.py ----")
    print(source, end="" if source.endswith("\n") else "\n")
    print("# ---- result.json ----")
    print(json.dumps(record, indent=2))
    return EXIT_OK


def run_best(args: argparse.Namespace) -> int:
    with _open(args) as repo:
        attempt = repo.best()
        if attempt is None:
            raise UsageError(f"workspace {repo.name} has no correct attempt yet")
        record = repo.record(attempt)
        if kept_eager(attempt, record):  # agent/loop/kept_eager.py: say so instead of handing out a slower kernel
            line = no_faster_line(attempt, record)
            if not args.reference:
                print(f"ratchet best: {line}; nothing written (--reference writes the reference as {MODEL_NEW}; "
                      f"ratchet show {repo.name} --best shows the attempt)", file=sys.stderr)
                return EXIT_KEPT_EAGER
            try:
                source = reference_as_model_new(repo.reference_source(), entry=args.entry, why=line)
            except ValueError as exc:
                raise UsageError(f"cannot write the reference of {repo.name} as {MODEL_NEW}: {exc}") from None
            _write(args.output, source)
            where = f"to {args.output}" if args.output else "to stdout"
            print(f"wrote the reference as {MODEL_NEW} {where}: {line}", file=sys.stderr)
            return EXIT_OK
        source = repo.source(attempt)
        note = generality_note(attempt.number, record)
    _write(args.output, source)
    if args.output:
        print(f"wrote attempt {attempt.number} ({attempt.summary()}) to {args.output}", file=sys.stderr)
    print(note, file=sys.stderr)
    return EXIT_OK


def _write(output: str | None, source: str) -> None:
    """`source` to the file named (atomically), or to stdout."""
    if output:
        out = Path(output)
        if not out.parent.is_dir():
            raise UsageError(f"cannot write {out}: no directory {out.parent}")
        try:
            atomic_write(out, source)
        except OSError as exc:
            raise UsageError(f"cannot write {out}: {exc.strerror}") from None
    else:
        sys.stdout.write(source)


def generality_note(number: int, record: dict) -> str:
    """One line on whether the kept kernel is a drop-in beyond the problem's own sizes
    (the evaluator's held-out trials, tools/judge/heldout.py)."""
    tried = [h for h in record.get("heldout", []) if h.get("outcome") != "not used"]
    if record.get("generalizes") is True:
        return f"attempt {number} is general: also right on held-out {'; '.join(h['variant'] for h in tried)}"
    if record.get("generalizes") is False:
        refused = next((h for h in tried if h.get("outcome") == "refused"), {})
        return (f"attempt {number} is specialized to the problem's shapes and arguments (declared): it refuses others, "
                f"e.g. {refused.get('variant', 'held-out sizes')}: {refused.get('detail', '')}")
    if "heldout" not in record:
        return f"attempt {number} was evaluated before the drop-in check: it is unknown whether it works beyond the problem's own sizes"
    why = "; ".join(h.get("detail", "") for h in record.get("heldout", [])) or "no held-out variant"
    return f"attempt {number} was not checked beyond the problem's own sizes ({why})"
