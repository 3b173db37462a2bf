"""`ratchet optimize MODULE.py`: drive a model through draft, compile, test, profile and refine.

Progress goes to stderr (one line per attempt: verdict, best speedup so far); the final summary
goes to stdout, as one JSON object with --json. Exit codes:

    0   a correct kernel was found in this run (the best is in the workspace); where it is not
        faster than eager PyTorch beyond noise, the summary says "no kernel faster than PyTorch"
    10  the run ended (a budget spent or an early stop) with no correct kernel
    11  the model endpoint was unreachable after retries, did not answer within the request
        timeout (tried twice), or refused the request (400/401/404); continue with --resume
    12  the built-in policy (--model builtin, the default with no model named) recognizes nothing
        in the module: one line says why, and nothing is attempted
    2   usage error: bad flags or settings, a model name needed (docs/model.md), nothing to resume
    3   the module is not a valid problem
    15  --ray: the Ray cluster could not be reached, or cannot hold the judges (no GPU, fewer than --judges)
    130 interrupted (Ctrl-C); continue with --resume
"""
from __future__ import annotations

import argparse
import json
import sys
from typing import TYPE_CHECKING

from agent.cli.checks import UsageError, check_device, device_origin, ray_installed, readable_file
from agent.cli.settings import add_settings, settings
from agent.config import ConfigError
from agent.cost import cost_phrase
from agent.loop.kept_eager import NO_FASTER
from agent.model_choice import NoModelNamed, model_client
from agent.cli.exit_codes import EXIT_BAD_PROBLEM, EXIT_CLUSTER, EXIT_MODEL, EXIT_SANDBOX, EXIT_UNRECOGNIZED

if TYPE_CHECKING:  # the runner imports langgraph: only when a run starts
    from agent.loop.ray_judges import RayJudging
    from agent.loop.runner import RunResult


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("optimize", help="optimize a PyTorch module with a model, attempt by attempt",
                              description=__doc__.split("\n\n")[0],
                              epilog="Settings: command line over environment (OPENAI_BASE_URL, OPENAI_API_KEY, "
                                     "RATCHET_*) over a config file (--config, $RATCHET_CONFIG or ./ratchet.toml) "
                                     "over defaults. See docs/config.md.")
    p.add_argument("module", metavar="MODULE.py", help="the problem: a module defining Model, get_inputs, get_init_inputs")
    p.add_argument("--entry", metavar="CLASS", help="the reference class (default Model)")
    p.add_argument("--resume", action="store_true", help="continue this problem's interrupted run")
    p.add_argument("--json", action="store_true", help="print the summary as one JSON object on stdout")
    p.add_argument("--device", metavar="DEV[,DEV...]", help="evaluation device (default: cuda:0 when there is a GPU, "
                   "else cpu); several, comma-separated, judge a wide step's candidates at once, one per device")
    p.add_argument("--ray", metavar="ADDRESS", help="judge the candidates on a Ray cluster's GPUs, one judge per GPU "
                   "(the run stays here): local, auto, HOST:PORT or ray://HOST:PORT; with --device cpu, on its CPUs")
    p.add_argument("--judges", type=int, metavar="N", help="with --ray: how many judges (default: one per GPU of the "
                   "cluster; with --device cpu, one)")
    p.add_argument("--ray-code", choices=("ship", "installed"), default="ship",
                   help="with --ray: ship this project's code to the nodes (default) or use the one installed there")
    add_settings(p, "of the run")
    p.set_defaults(func=run)


def check_devices(devices: str, given_as: str) -> str:
    """Each of a comma-separated device list checked (check_device), as one string again. A GPU named
    twice is refused: two evaluators timing on one card would each disturb the other's times."""
    resolved = [check_device(d.strip(), given_as) or "" for d in devices.split(",")]
    gpus = [d for d in resolved if d != "cpu"]
    if len(set(gpus)) != len(gpus):
        raise UsageError(f"{given_as}: a GPU is named twice; each device judges one candidate at a time, alone on its card")
    if gpus and len(gpus) != len(resolved):
        raise UsageError(f"{given_as}: GPUs and the CPU mixed; a CPU times nothing, so its attempts would not compare "
                         "with the GPUs'")
    return ",".join(resolved)


def ray_judging(args: argparse.Namespace, device: str | None) -> RayJudging | None:
    """The --ray flags checked (agent/loop/ray_judges.py), or None without --ray."""
    from agent.loop.ray_judges import RayJudging

    if args.ray is None:
        if args.judges is not None or args.ray_code != "ship":
            raise UsageError("--judges and --ray-code go with --ray")
        return None
    if args.judges is not None and args.judges < 1:
        raise UsageError("--judges must be at least 1")
    if device not in (None, "cpu"):
        raise UsageError(f"--ray judges on the GPUs Ray gives each judge; --device takes only cpu with it, not {device}")
    ray_installed()
    return RayJudging(address=args.ray, judges=args.judges, code=args.ray_code)


def run(args: argparse.Namespace) -> int:
    config = settings(args, extra=("entry", "device"))
    module = readable_file(args.module, "the problem module")
    ray = ray_judging(args, config.device)
    if config.device is not None and ray is None:  # named as it was given: the flag, RATCHET_DEVICE or the config file's key
        config.device = check_devices(config.device, device_origin(config.device, config.sources()["device"]))
    if args.resume:
        from agent.loop.runner import NothingToResume, resumable_run
        from agent.workspace.root import WorkspaceError

        try:  # before any model, evaluator or workspace exists: nothing to resume creates nothing
            resumable_run(module, config)
        except (NothingToResume, WorkspaceError) as exc:
            raise UsageError(str(exc)) from None
    from agent.model import ModelError
    from tools.problem import ProblemError, read_problem

    try:  # static checks of the problem file first: a broken one is one line, before anything else is said
        read_problem(module, config.entry or "Model")
    except ProblemError as exc:
        print(f"ratchet optimize: {exc}", file=sys.stderr)
        return EXIT_BAD_PROBLEM
    from agent.workspace.root import Workspace, WorkspaceError

    try:  # a workspace that could not be written is one line now, not after the evaluator's start
        Workspace(config.workspace).check_writable(module, module.read_bytes())
    except WorkspaceError as exc:
        raise UsageError(str(exc)) from None
    try:
        client = model_client(config, module)
    except (NoModelNamed, ConfigError) as exc:  # ConfigError: a typo in the price table (agent/cost.py)
        raise UsageError(str(exc)) from None
    except ModelError as exc:
        print(f"ratchet optimize: {exc}", file=sys.stderr)
        return EXIT_MODEL
    unrecognized = getattr(client, "unrecognized", None)
    if unrecognized:  # the built-in policy has no kernel for it: one line, no attempt
        print(f"ratchet optimize: {unrecognized}", file=sys.stderr)
        return EXIT_UNRECOGNIZED
    from agent.builtin import NothingRecognized
    from agent.batch.ray_slots import ClusterError
    from agent.loop.ray_judges import JudgesUnavailable
    from agent.loop.runner import NothingToResume, optimize
    from tools.sandbox import SandboxUnavailable

    try:
        result = optimize(module, config, client, resume=args.resume, ray=ray)
    except NothingRecognized as exc:
        print(f"ratchet optimize: {exc}", file=sys.stderr)
        return EXIT_UNRECOGNIZED
    except NothingToResume as exc:
        raise UsageError(str(exc)) from None
    except WorkspaceError as exc:
        raise UsageError(str(exc)) from None
    except ProblemError as exc:
        print(f"ratchet optimize: {exc}", file=sys.stderr)
        return EXIT_BAD_PROBLEM
    except SandboxUnavailable as exc:
        print(f"ratchet optimize: {exc}", file=sys.stderr)
        return EXIT_SANDBOX
    except (ClusterError, JudgesUnavailable) as exc:
        print(f"ratchet optimize: {exc}", file=sys.stderr)
        return EXIT_CLUSTER
    finally:
        close = getattr(client, "close", None)
        if close:
            close()
    report(result, as_json=args.json)
    return result.exit_code


def report(result: RunResult, *, as_json: bool) -> None:
    s = result.summary
    if as_json:
        print(json.dumps(s))
        return
    best = s["best"]
    lines = [f"run {s['run_id']}: {s['status']}" + (f" ({s['stop_reason']})" if s["stop_reason"] else "")]
    if s["error"]:
        lines.append(f"error: {s['error']}")
    lines.append(f"attempts: {s['attempts']} evaluated, {s['correct']} correct, {s['format_errors']} malformed replies; "
                 f"{s['tokens_used']} tokens, {cost_phrase(s.get('cost_usd'), s.get('model'))}")
    if best is None:
        lines.append("best: no correct kernel in this run")
    elif best["speedup_vs_eager"] is None:
        lines.append(f"best of this run: attempt {best['attempt']} (correct; timing not measured)")
    else:
        figures = [f"{best['speedup_vs_eager']:.2f}x vs eager"]
        if best["speedup_vs_compile"] is not None:
            figures.append(f"{best['speedup_vs_compile']:.2f}x vs torch.compile")
        if best["roofline_fraction"] is not None:
            figures.append(f"{best['roofline_fraction']:.0%} of the roofline floor")
        lines.append(f"best of this run: attempt {best['attempt']}: " + ", ".join(figures))
    if best is not None and best.get("kept_eager"):  # agent/loop/kept_eager.py
        lines.append(f"{NO_FASTER}: attempt {best['attempt']} is not faster than eager beyond noise; the reference "
                     f"stays the answer (ratchet best --reference writes it as ModelNew)")
    held = s.get("workspace_best_attempt")
    if s["best_path"]:
        kept = "" if best is None or held == best["attempt"] else f" (the workspace's best, attempt {held}, beats this run's)"
        lines.append(f"best file: {s['best_path']}{kept}")
    print("\n".join(lines))
