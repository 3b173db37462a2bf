"""`ratchet eval REFERENCE CANDIDATE`: evaluate one candidate file against a problem file.

The exit code says the verdict (agent/cli/exit_codes.py, EVAL_EXIT_CODES). An exception out of the
evaluator itself (a bug, a lost reference, an unusable cache directory) never prints a
traceback: one line `ratchet eval: internal error: <type>: <message>` on stderr, exit 9, and
with --json a minimal record with verdict `error` on stdout.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import sys
from pathlib import Path

from agent.cli.checks import UsageError, check_device, readable_file
from agent.cli.exit_codes import EVAL_EXIT_CODES, EXIT_BAD_PROBLEM, EXIT_SANDBOX
from tools.options import SANDBOX_MODES
from tools.precision import PRECISIONS
from tools.record import Result, Verdict, describe_exception, fault_result


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("eval", help="evaluate a candidate ModelNew against a problem file",
                              description="Build, check and time CANDIDATE (a ModelNew) against REFERENCE (a KernelBench-format problem).")
    p.add_argument("reference", type=Path, help="problem file: Model, get_inputs, get_init_inputs")
    p.add_argument("candidate", type=Path, help="candidate file defining ModelNew")
    p.add_argument("--entry", default="Model", help="the reference class (default Model)")
    p.add_argument("--json", action="store_true", help="print the full result record as JSON on stdout")
    p.add_argument("--trials", type=int, default=5, help="correctness trials (default 5, at least 1)")
    p.add_argument("--device", default=None, help="cuda:N or cpu (default: cuda:0 if there is a GPU)")
    p.add_argument("--no-timing", action="store_true", help="skip timing (correctness only)")
    p.add_argument("--allow", action="append", default=[], metavar="RULE", help="switch off a guard rule (repeatable; see docs/evaluator.md)")
    p.add_argument("--timeout", type=float, default=60.0, help="seconds allowed per trial (default 60)")
    p.add_argument("--precision", choices=PRECISIONS, default="fp32",
                   help="float32 arithmetic of the baselines and both workers: fp32 (default; IEEE, TF32 off) or tf32 "
                        "(TF32 tensor cores admitted); docs/precision.md")
    p.add_argument("--sandbox", choices=SANDBOX_MODES, default=os.environ.get("RATCHET_SANDBOX", "required"),
                   help="confinement of the candidate's code: required (default; refuse without it) or best-effort "
                        "(run with what this machine offers; the record says what was missing); docs/sandbox.md")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    if args.trials < 1:
        raise UsageError("--trials must be at least 1")
    if not (math.isfinite(args.timeout) and args.timeout > 0):
        raise UsageError(f"--timeout {args.timeout:g}: expected a positive number of seconds")
    from tools.guard.names import RULES

    if unknown := sorted(set(args.allow) - RULES):
        raise UsageError(f"--allow {unknown[0]}: no such guard rule (the rules: {', '.join(sorted(RULES))})")
    readable_file(args.reference, "the reference")
    try:
        source = readable_file(args.candidate, "the candidate").read_text()
    except UnicodeDecodeError as exc:
        raise UsageError(f"{args.candidate}: cannot read the candidate ({exc})") from None
    if args.sandbox not in SANDBOX_MODES:
        raise UsageError(f"RATCHET_SANDBOX={args.sandbox}: expected {' or '.join(SANDBOX_MODES)}")
    args.device = check_device(args.device)
    from tools.env import DeviceError
    from tools.problem import ProblemError, read_problem
    from tools.judge.static import precheck

    try:
        problem = read_problem(Path(args.reference), args.entry)  # static: no worker yet
    except ProblemError as exc:
        return bad_problem(exc)
    early = precheck(source, problem, frozenset(args.allow))  # refused statically: no worker needs to start
    if early is not None:
        early.precision = args.precision  # the setting it would have run under
        return report(early, args)
    from tools import EvalOptions, Evaluator  # torch: only for a file that passed the static checks
    from tools.sandbox import SandboxUnavailable

    options = EvalOptions(device=args.device, trials=args.trials, timing=not args.no_timing,
                          disabled_rules=frozenset(args.allow), trial_timeout=args.timeout, warm=False,
                          sandbox=args.sandbox, precision=args.precision)
    try:
        evaluator = Evaluator(args.reference, options, entry=args.entry)
    except ProblemError as exc:
        return bad_problem(exc)
    except SandboxUnavailable as exc:
        print(f"ratchet eval: {exc}", file=sys.stderr)
        return EXIT_SANDBOX
    except DeviceError as exc:  # a bad --device (checked above; the evaluator checks it again)
        raise UsageError(str(exc)) from None
    except Exception as exc:  # noqa: BLE001 - an evaluator fault: one line and exit 9, never a traceback
        return internal_error(exc, args, source)
    try:
        with evaluator:
            result = evaluator.evaluate(source)
    except ProblemError as exc:
        return bad_problem(exc)
    except Exception as exc:  # noqa: BLE001 - evaluate() never raises for the candidate: this is ours
        return internal_error(exc, args, source)
    return report(result, args)


def report(result: Result, args: argparse.Namespace) -> int:
    if args.json:
        print(json.dumps(result.to_dict(), indent=2))
    else:
        print(summary(result, args.candidate))
    return EVAL_EXIT_CODES[result.verdict]


def bad_problem(exc: Exception) -> int:
    print(f"ratchet eval: {exc}", file=sys.stderr)
    return EXIT_BAD_PROBLEM


def internal_error(exc: Exception, args: argparse.Namespace, source: str) -> int:
    """An exception out of the evaluator (a bug of ratchet, a lost reference, an unusable cache):
    one line on stderr, and with --json a minimal record with verdict error on stdout."""
    record = fault_result(exc, problem=str(args.reference), source=source)
    print(f"ratchet eval: internal error: {describe_exception(exc)}", file=sys.stderr)
    if args.json:
        print(json.dumps(record.to_dict(), indent=2))
    return EVAL_EXIT_CODES[record.verdict]


def summary(result: Result, candidate: Path) -> str:
    lines = [f"{candidate.name}: {result.verdict.value}", f"  {result.message}"]
    if result.verdict is Verdict.ERROR:
        lines.append("  (an evaluator fault: ratchet failed, not the candidate; evaluate it again)")
    if result.trials:
        lines.append(f"  trials passed: {result.trials}; max abs error {result.errors.max_abs:.3g}; "
                     f"own kernel launches per forward: {result.kernel_launches}")
    if result.torch_ops:
        lines.append(f"  ops left to torch: {', '.join(result.torch_ops)}")
    for dist, why in result.dropped.items():
        lines.append(f"  {dist} inputs: {why}")
    t = result.candidate_time
    if t.measured:
        lines.append(f"  time: {t.median_ms:.4g} ms (95% CI {t.ci_low_ms:.4g}-{t.ci_high_ms:.4g}, n={t.samples})")
        for label, base, speedup in (("eager", result.eager_time, result.speedup_vs_eager),
                                     ("torch.compile", result.compile_time, result.speedup_vs_compile)):
            if base.measured and speedup is not None:
                lines.append(f"  vs {label}: {base.median_ms:.4g} ms -> {speedup:.2f}x")
        if result.roofline.measured:
            lines.append(f"  roofline: floor {result.roofline.floor_ms:.4g} ms, achieved {result.roofline.achieved_fraction:.1%}")
    else:
        lines.append(f"  timing: {t.note}")
    phases = ", ".join(f"{k} {v:.2f}s" for k, v in result.phases.items())
    lines.append(f"  phases: {phases}")
    return "\n".join(lines)
