"""`ratchet export WORKSPACES... --format sft|rl --out FILE.jsonl`: attempts as training data;
`ratchet export PROBLEMS... --format harbor --out DIR`: problems as Harbor tasks.

WORKSPACES are workspace roots (every problem repository under them) or single problem
repositories. SFT rows are saved trajectories (chat messages with tool calls, plus `tools`);
RL rows are prompts with the problem's path, source and metadata (see agent/learn/export.py). Rows
go to FILE (JSON lines; stdout without --out, or with --out -); a summary (rows written,
duplicates, filtered, skipped) goes to stdout as one JSON object when writing a file, else to
stderr. Harbor tasks (agent/learn/harbor.py): PROBLEMS are problem files or suite directories,
one task folder each under DIR (instruction, task.toml, environment, a verifier computing ratchet's
reward). Exit codes: 0 done (even with no rows), 2 usage error (no such workspace or problem, a bad
flag, a task folder in the way), 3 a problem file that is not a valid problem.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

from agent.cli.checks import UsageError, check_device
from agent.cli.exit_codes import EXIT_OK
from tools.precision import PRECISIONS


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("export", help="export attempts as SFT or RL training data (JSON lines)",
                              description=__doc__.split("\n\n")[0])
    p.add_argument("workspaces", nargs="+", metavar="WORKSPACES",
                   help="workspace roots, or problem repositories (directories holding ratchet.json); "
                        "with --format harbor: problem files or suite directories")
    p.add_argument("--format", choices=("sft", "rl", "harbor"), default="sft",
                   help="sft: trajectories; rl: prompts; harbor: one Harbor task folder per problem (default sft)")
    p.add_argument("--out", metavar="FILE.jsonl", default="-", help="output file (default: stdout); harbor: the tasks' directory")
    sft = p.add_argument_group("sft rows")
    sft.add_argument("--correct", action="store_true", help="only rows whose outcome is correct (verdict ok)")
    sft.add_argument("--min-speedup", type=float, metavar="X",
                     help="only rows timed at least X times faster than the baseline (untimed rows never pass)")
    sft.add_argument("--baseline", choices=("eager", "compile"), default="eager",
                     help="the speedup --min-speedup reads (default eager)")
    sft.add_argument("--unit", choices=("attempt", "run"), default="attempt",
                     help="attempt: one row per submitted source, the conversation up to it (default); run: one row per run")
    sft.add_argument("--reasoning", action="store_true", help="keep the model's reasoning text (reasoning_content)")
    rl = p.add_argument_group("rl rows")
    rl.add_argument("--device", default="cpu", help="where the reference worker describes each problem (default cpu)")
    rl.add_argument("--gpu", metavar="NAME", help="the target GPU named in the system prompt (default: the run's, else generic)")
    rl.add_argument("--language", choices=("triton", "cuda"), help="kernel language of the prompt (default: the run's, else triton)")
    rl.add_argument("--max-attempts", type=int, metavar="N", help="attempts announced in the task message (default 20)")
    harbor = p.add_argument_group("harbor tasks")
    harbor.add_argument("--image", metavar="IMAGE", help="the tasks' base image (a CUDA PyTorch image with a toolkit)")
    harbor.add_argument("--sandbox", choices=("required", "best-effort"), default="required",
                        help="the verifier's sandbox mode (best-effort: where the container allows no user namespaces)")
    harbor.add_argument("--precision", choices=PRECISIONS, default="fp32", help="the baselines' float32 arithmetic, or the half type the problem is cast to")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    if args.format == "rl" and (args.correct or args.min_speedup is not None):
        raise UsageError("--correct and --min-speedup filter SFT rows; RL rows are one prompt per problem")
    if args.min_speedup is not None and args.min_speedup <= 0:
        raise UsageError("--min-speedup must be positive")
    if args.format == "harbor":
        return harbor_tasks(args)
    if args.format == "rl":  # only RL rows start a reference worker on it
        args.device = check_device(args.device)
    from agent.learn.export import ExportError, ExportStats, rl_rows, sft_rows, write_jsonl  # git

    stats = ExportStats()
    log = lambda line: print(f"ratchet export: {line}", file=sys.stderr)  # noqa: E731
    try:
        if args.format == "sft":
            rows = sft_rows(args.workspaces, correct=args.correct, min_speedup=args.min_speedup, baseline=args.baseline,
                            unit=args.unit, reasoning=args.reasoning, stats=stats)
        else:
            rows = rl_rows(args.workspaces, device=args.device, gpu=args.gpu, language=args.language,
                           max_attempts=args.max_attempts, stats=stats, log=log)
        if args.out == "-":
            write_jsonl(rows, sys.stdout)
            print(json.dumps({**stats.to_dict(), "out": "-"}), file=sys.stderr)
            return EXIT_OK
        out = Path(args.out)
        tmp = out.with_name(f".{out.name}.{os.getpid()}.tmp")
        try:
            f = open(tmp, "w")
        except OSError as exc:
            raise UsageError(f"cannot write {args.out}: {exc.strerror or exc}") from None
        try:
            with f:
                write_jsonl(rows, f)  # the rows are read from the workspaces as they are written
            os.replace(tmp, out)
        finally:
            tmp.unlink(missing_ok=True)
    except ExportError as exc:
        raise UsageError(str(exc)) from None
    except OSError as exc:  # reading a workspace, or writing the file: the error names which
        raise UsageError(f"{exc.filename or args.out}: {exc.strerror or exc}") from None
    print(json.dumps({**stats.to_dict(), "out": str(args.out)}))
    return EXIT_OK


def harbor_tasks(args: argparse.Namespace) -> int:
    from agent.cli.exit_codes import EXIT_BAD_PROBLEM
    from agent.learn.harbor import HarborError, HarborOptions, export_tasks
    from tools.problem import ProblemError

    if args.out == "-":
        raise UsageError("--format harbor needs --out DIR: the directory the task folders go to")
    out = Path(args.out)
    if out.exists() and not out.is_dir():
        raise UsageError(f"--out {out}: not a directory")
    options = HarborOptions(sandbox=args.sandbox, reward={"precision": args.precision})
    if args.image:
        options.base_image = args.image
    try:
        folders = export_tasks(args.workspaces, out, options)
    except ProblemError as exc:
        print(f"ratchet export: {exc}", file=sys.stderr)
        return EXIT_BAD_PROBLEM
    except HarborError as exc:
        raise UsageError(str(exc)) from None
    except OSError as exc:
        raise UsageError(f"{exc.filename or out}: {exc.strerror or exc}") from None
    print(json.dumps({"tasks": len(folders), "out": str(out)}))
    return EXIT_OK
