"""`ratchet batch SUITE`: the agent over every problem file of a directory, one worker per GPU.

SUITE is a directory of problem files in the KernelBench format (a KernelBench level folder
works as it is; so does ratchet's bundled `suite/`). Every problem runs `ratchet optimize` in a
worker subprocess pinned to one GPU (CUDA_VISIBLE_DEVICES); the workers take problems from one
queue, so no GPU idles while work remains. Without a GPU, `--cpu-workers N` processes run the
kernels in Triton's interpreter (correctness only: nothing is timed on the CPU), and a suite with
a SUITE_SCALE switch (the bundled suite/) runs at SUITE_SCALE=small unless it is set (one line
says so; agent/batch/scale.py).

One JSON line per problem is appended to `<out>/results.jsonl` the moment it finishes; progress
goes to stderr; `ratchet report <out>` prints the suite's table and writes its HTML page. On
stdout at the end: one JSON object (the run directory, problems done and total). Exit codes:

With `--ray ADDRESS` the problems run as Ray tasks on a cluster and every attempt is committed
here, in this machine's workspace (agent/batch/ray_slots.py, docs/batch.md).

    0   every problem of the suite has a result (whatever its verdict)
    1   some problems have none (their workers crashed, or the model endpoint failed): --resume
    2   usage error: bad flag, no problems, a model name needed, a run directory in the way
    11  the endpoint's model list (asked when no model is named) could not be read
    15  --ray: the Ray cluster could not be reached or started, or has no GPU for a GPU run
    130 interrupted (Ctrl-C or SIGTERM); continue with --resume
"""
from __future__ import annotations

import argparse
import json
import os
import shlex
import signal
import sys
import time
from collections.abc import Callable
from pathlib import Path

from agent.batch.driver import discover, pending, run_batch
from agent.batch.local import LocalScheduler, Slot
from agent.batch.log import FINAL, LOGS, RESULTS, RUN_META, RunLog
from agent.batch.problem import make_spec, problem_key
from agent.batch.scale import SCALE_VAR, cpu_scale, scale_line
from agent.cli.checks import UsageError, check_device, device_origin
from agent.config import ConfigError
from agent.cli.settings import add_settings, settings
from agent.cli.settings import given as shared_settings
from agent.cli.exit_codes import EXIT_INCOMPLETE, EXIT_INTERRUPTED, EXIT_MODEL, EXIT_OK, EXIT_SANDBOX
from tools.sandbox import Sandbox, SandboxUnavailable


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("batch", help="optimize every problem of a suite directory, one worker per GPU",
                              description=__doc__.split("\n\n")[0],
                              epilog="Agent settings not given here come from the environment (RATCHET_*, "
                                     "OPENAI_*) and the config file, as for `ratchet optimize` (docs/config.md). "
                                     "See docs/batch.md.")
    p.add_argument("suite", metavar="SUITE", help="a directory of problem files (Model, get_inputs, get_init_inputs)")
    p.add_argument("--gpus", metavar="IDS", help="comma-separated GPU ids, one worker each (default: every visible GPU); "
                                                 "repeat an id to run two problems on one GPU")
    p.add_argument("--cpu-workers", type=int, metavar="N",
                   help="run on the CPU (Triton interpreter) with N workers (default when there is no GPU: 1)")
    p.add_argument("--ray", metavar="ADDRESS",
                   help="run on a Ray cluster: local (start one on this host), auto, HOST:PORT or ray://HOST:PORT; "
                        "one GPU per problem (with --cpu-workers N: N CPU slots); see docs/batch.md")
    p.add_argument("--ray-code", choices=("ship", "installed"), default="ship",
                   help="with --ray: ship this project's code to the nodes (default) or use the one installed there")
    p.add_argument("--api-key-env", metavar="NAME",
                   help="with --ray: the environment variable each node reads the API key from (default: the "
                        "node's own OPENAI_API_KEY / RATCHET_API_KEY / config file); the key never travels")
    p.add_argument("--filter", metavar="REGEX", help="only problems whose file stem matches REGEX (re.search)")
    p.add_argument("--out", metavar="DIR", help="run directory (default ./runs/<suite>-<date>-<time>)")
    p.add_argument("--resume", action="store_true",
                   help="continue the run in --out: skip finished problems, continue unfinished ones from their workspaces")
    add_settings(p, "per problem")
    p.set_defaults(func=run)


def slots_from(args: argparse.Namespace) -> list[Slot]:
    if args.cpu_workers is not None:
        if args.gpus:
            raise UsageError("give --gpus or --cpu-workers, not both")
        if args.cpu_workers < 1:
            raise UsageError("--cpu-workers must be at least 1")
        return [Slot.cpu(i) for i in range(args.cpu_workers)]
    gpus = [g.strip() for g in args.gpus.split(",") if g.strip()] if args.gpus else None
    if args.gpus is not None and not gpus:
        raise UsageError(f"--gpus {args.gpus!r} names no GPU")
    visible = _visible_gpus()
    if gpus is None:
        return [Slot.gpu(g) for g in visible] if visible else [Slot.cpu(0)]
    if not visible:
        raise UsageError(f"--gpus {args.gpus}: no CUDA GPU is available on this machine (use --cpu-workers N)")
    unknown = [g for g in gpus if g not in visible]
    if unknown:
        raise UsageError(f"--gpus {args.gpus}: no GPU {', '.join(unknown)} on this machine (visible: {', '.join(visible)})")
    return [Slot.gpu(g) for g in gpus]


def _visible_gpus() -> list[str]:
    """The GPU ids a worker may be given: CUDA_VISIBLE_DEVICES's entries, else 0..count-1."""
    import torch

    if not torch.cuda.is_available():
        return []
    listed = os.environ.get("CUDA_VISIBLE_DEVICES")
    if listed:
        return [g.strip() for g in listed.split(",") if g.strip()]
    return [str(i) for i in range(torch.cuda.device_count())]


def settings_from(args: argparse.Namespace, write: Callable[[str], None]) -> dict:
    """The agent settings every problem gets; the model is chosen here, once (agent.model_choice),
    and passed to the workers by name. Raises UsageError, ModelError, SandboxUnavailable."""
    from agent.model_choice import NoModelNamed, choose_model
    from agent.workspace.root import resolve_root

    config, given = settings(args), shared_settings(args)
    if config.device is not None:  # each worker's device is its slot's; a device named anyway must be one
        check_device(config.device, device_origin(config.device, config.sources()["device"]))
    try:
        given["model"] = choose_model(config, lambda line: write(f"batch: {line}"))
    except (NoModelNamed, ConfigError) as exc:  # ConfigError: a typo in the price table (agent/cost.py)
        raise UsageError(str(exc)) from None
    Sandbox(config.sandbox)  # SandboxUnavailable now, once, rather than from every problem
    given["workspace"] = str(resolve_root(config.workspace).resolve())  # the same root for every worker
    return given


def check_workspaces(root: Path, problems: list[Path]) -> None:
    """Every problem's workspace could be opened for writing: a root that is a file, unwritable or
    unreadable, or a foreign repository in a problem's place, is one usage error before any work
    (not a row per problem without a result)."""
    from agent.workspace.root import Workspace, WorkspaceError

    workspace = Workspace(root)
    for problem in problems:
        try:
            data = problem.read_bytes()
        except OSError:
            continue  # the problem's own run says it cannot read the file
        try:
            workspace.check_writable(problem, data)
        except WorkspaceError as exc:
            raise UsageError(f"--workspace: {exc}") from None


def run(args: argparse.Namespace) -> int:
    suite = Path(args.suite)
    if args.resume and args.out and args.filter is None:  # the run's own problems, not the whole suite
        args.filter = _run_filter(Path(args.out))
    try:
        problems = discover(suite, args.filter)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    except Exception as exc:  # re.error: a bad --filter
        raise UsageError(f"--filter: {exc}") from None
    if not problems:
        raise UsageError(f"no problem files in {suite}" + (f" matching {args.filter!r}" if args.filter else ""))
    if args.resume and not args.out:
        raise UsageError("--resume needs --out DIR: the run directory to continue")
    if args.out and Path(args.out).exists() and not Path(args.out).is_dir():
        raise UsageError(f"--out {args.out}: not a directory (the run's directory: results, logs, run.json)")
    from agent.model import ModelError

    write = lambda line: print(line, file=sys.stderr, flush=True)  # noqa: E731
    if args.ray is None and (args.api_key_env or args.ray_code != "ship"):
        raise UsageError("--api-key-env and --ray-code go with --ray")
    if args.ray is not None:
        from agent.cli.batch_ray import check_ray_args

        slots = check_ray_args(args)
    else:
        slots = slots_from(args)  # a bad --gpus is a usage error before anything else is said
    try:
        settings = settings_from(args, write)
    except SandboxUnavailable as exc:
        print(f"ratchet batch: {exc}", file=sys.stderr)
        return EXIT_SANDBOX
    except ModelError as exc:
        print(f"ratchet batch: {exc}", file=sys.stderr)
        return EXIT_MODEL
    check_workspaces(Path(settings["workspace"]), problems)
    if all(slot.device == "cpu" for slot in slots):
        scaled = cpu_scale(problems, os.environ)  # the bundled suite's GPU sizes would time out in the interpreter
        if scaled:
            for slot in slots:
                slot.env.update(scaled)
            write(scale_line(suite))
    out = Path(args.out) if args.out else Path("runs") / f"{suite.resolve().name}-{time.strftime('%Y%m%d-%H%M%S')}"
    if args.ray is not None:
        from agent.cli.batch_ray import run_on_ray

        return run_on_ray(args, suite, problems, settings, slots, out, write,
                          lambda executor: _open_run(out, suite, problems, settings, slots, args, executor), _finish)
    meta = _open_run(out, suite, problems, settings, slots, args)
    log = RunLog(out / RESULTS)
    log.repair()
    todo, done = pending(problems, log, resume=args.resume)
    config_file = str(Path(args.config).resolve()) if args.config else None
    specs = [make_spec(p, settings=settings, config_file=config_file, resume=args.resume, since=meta["started_at"],
                       log=out / LOGS / f"{problem_key(p)}.log") for p in todo]
    write(f"batch: {len(problems)} problem(s) from {suite}, {done} already done; {len(slots)} worker(s): "
          f"{', '.join(s.name for s in slots)}; results in {out / RESULTS}")
    previous = signal.signal(signal.SIGTERM, _interrupt)
    scheduler = LocalScheduler(slots)
    try:
        run_batch(specs, scheduler, log, total=len(problems), done=done, write=write)
    except KeyboardInterrupt:
        write(f"batch: interrupted; continue with: {resume_command(suite, out, args.filter)}")
        return EXIT_INTERRUPTED
    finally:
        signal.signal(signal.SIGTERM, previous)
    return _finish(suite, problems, log, out, write)


def _finish(suite: Path, problems: list[Path], log: RunLog, out: Path, write: Callable[[str], None]) -> int:
    """The summary on stdout and the exit code, once the batch has run."""
    latest = log.latest()
    finished = [k for k in (problem_key(p) for p in problems) if latest.get(k, {}).get("status") in FINAL]
    meta_filter = _run_filter(out)
    summary = {"run": str(out), "results": str(out / RESULTS), "total": len(problems), "done": len(finished),
               "correct": sum(bool(latest[k].get("correct")) for k in finished)}
    print(json.dumps(summary))
    if len(finished) < len(problems):
        write(f"batch: {len(problems) - len(finished)} problem(s) without a final result; "
              f"continue with: {resume_command(suite, out, meta_filter)}")
        return EXIT_INCOMPLETE
    write(f"batch: done; ratchet report {out}")
    return EXIT_OK


def resume_command(suite: Path, out: Path, problem_filter: str | None) -> str:
    """The command that continues this run, its --filter included (without it, a resumed run of three
    problems of a 26-problem suite grew to all 26)."""
    words = ["ratchet", "batch", str(suite), "--out", str(out), "--resume"]
    if problem_filter:
        words += ["--filter", problem_filter]
    return shlex.join(words)


def _run_filter(out: Path) -> str | None:
    """The --filter the run at `out` was started (or last resumed) with, or None."""
    try:
        sessions = json.loads((out / RUN_META).read_text()).get("sessions") or []
    except (OSError, ValueError, AttributeError):
        return None
    found = sessions[-1].get("filter") if sessions and isinstance(sessions[-1], dict) else None
    return found if isinstance(found, str) else None


def _interrupt(signum, frame) -> None:  # SIGTERM: stop like Ctrl-C (workers interrupted, run resumable)
    raise KeyboardInterrupt


def _open_run(out: Path, suite: Path, problems: list[Path], settings: dict, slots: list[Slot],
              args: argparse.Namespace, executor: dict | None = None) -> dict:
    """Write (or, with --resume, extend) run.json; `executor` records a cluster run's executor and address."""
    meta_path = out / RUN_META
    session = {"started_at": round(time.time(), 3), "workers": [s.name for s in slots], "filter": args.filter,
               "suite_scale": slots[0].env.get(SCALE_VAR, os.environ.get(SCALE_VAR)),
               **(executor or {"executor": "local"})}
    if args.resume:
        try:
            meta = json.loads(meta_path.read_text())
        except (OSError, ValueError):
            raise UsageError(f"--resume: {out} holds no batch run ({RUN_META} missing or unreadable)") from None
        if Path(meta.get("suite", "")).resolve() != suite.resolve():
            raise UsageError(f"--resume: {out} is a run of {meta.get('suite')}, not of {suite}")
        meta["sessions"] = [*meta.get("sessions", []), session]
        known = list(meta.get("problems", []))
        meta["problems"] = known + [problem_key(p) for p in problems if problem_key(p) not in known]
    else:
        if (out / RESULTS).exists() or meta_path.exists():
            raise UsageError(f"{out} already holds a batch run: continue it with --resume, or choose another --out")
        meta = {"batch": 1, "suite": str(suite.resolve()), "problems": [problem_key(p) for p in problems],
                "settings": settings, "started_at": session["started_at"], "sessions": [session],
                "device": "cpu" if slots[0].device == "cpu" else "cuda", "executor": session["executor"],
                "address": session.get("address")}
    (out / LOGS).mkdir(parents=True, exist_ok=True)
    tmp = meta_path.with_name(f".{RUN_META}.tmp")
    tmp.write_text(json.dumps(meta, indent=1) + "\n")
    os.replace(tmp, meta_path)
    return meta
