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
    130 interrupted (Ctrl-C); continue with --resume
"""
from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from agent.cli import UsageError
from agent.cli_checks import check_device, device_origin, readable_file
from agent.config import AgentConfig, ConfigError, load_config
from agent.kept_eager import NO_FASTER
from agent.model_choice import BUILTIN, NoModelNamed, choose_model
from tools.exit_codes import EXIT_BAD_PROBLEM, EXIT_MODEL, EXIT_SANDBOX, EXIT_UNRECOGNIZED

if TYPE_CHECKING:  # the model clients import openai, the runner langgraph: only when a run starts
    from agent.model import ModelClient, OpenAIChatClient
    from agent.runner import RunResult

# flag -> AgentConfig field, for the flags that map onto settings
SETTING_FLAGS = ("entry", "model", "base_url", "max_attempts", "language", "workspace", "device", "max_tokens",
                 "max_wall_s", "patience", "roofline_target", "memory_roofline_target", "context_tokens", "trials", "sandbox",
                 "request_timeout_s")


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("optimize", help="optimize a PyTorch module with a model, attempt by attempt",
                              description=__doc__.split("\n\n")[0],
                              epilog="Settings: command line over environment (OPENAI_BASE_URL, OPENAI_API_KEY, "
                                     "RATCHET_*) over a config file (--config, $RATCHET_CONFIG or ./ratchet.toml) "
                                     "over defaults. See docs/config.md.")
    p.add_argument("module", metavar="MODULE.py", help="the problem: a module defining Model, get_inputs, get_init_inputs")
    p.add_argument("--entry", metavar="CLASS", help="the reference class (default Model)")
    p.add_argument("--model", metavar="NAME", help="model name at the endpoint ($RATCHET_MODEL); 'builtin' (the "
                                                   "default when no model is named and no endpoint is given) is the "
                                                   "built-in offline policy")
    p.add_argument("--base-url", metavar="URL", help="OpenAI-compatible endpoint ($OPENAI_BASE_URL); without --model, "
                                                     "the one model it lists")
    p.add_argument("--request-timeout", dest="request_timeout_s", type=float, metavar="SECONDS",
                   help="give up on one model request after SECONDS (default 120; a timed-out request is tried twice)")
    p.add_argument("--max-attempts", type=int, metavar="N", help="attempt budget, malformed replies included (default 20)")
    p.add_argument("--language", choices=("triton", "cuda"), help="kernel language (default triton)")
    p.add_argument("--workspace", metavar="DIR", help="workspace root (default $RATCHET_WORKSPACE, else ./workspaces)")
    p.add_argument("--resume", action="store_true", help="continue this problem's interrupted run")
    p.add_argument("--json", action="store_true", help="print the summary as one JSON object on stdout")
    p.add_argument("--device", metavar="DEV", help="evaluation device (default: cuda:0 when there is a GPU, else cpu)")
    p.add_argument("--max-tokens", type=int, metavar="N", help="token budget of the run (default 2000000)")
    p.add_argument("--max-wall-s", type=float, metavar="S", help="wall-time budget in seconds (default 14400)")
    p.add_argument("--patience", type=int, metavar="N", help="stop after N attempts without a new best (0: never)")
    p.add_argument("--roofline-target", type=float, metavar="F", help="stop when the best, faster than eager, reaches F of the roofline floor (default 0.9)")
    p.add_argument("--memory-roofline-target", type=float, metavar="F",
                   help="the same for a memory-bound problem (default 0.8)")
    p.add_argument("--context-tokens", type=int, metavar="N", help="context budget of one request (default 32000)")
    p.add_argument("--trials", type=int, metavar="N", help="correctness trials per attempt (default 5)")
    p.add_argument("--sandbox", choices=("required", "best-effort"),
                   help="confinement of candidate code: required (default; refuse without it) or best-effort (docs/sandbox.md)")
    p.add_argument("--config", metavar="FILE", help="TOML config file (default $RATCHET_CONFIG, else ./ratchet.toml)")
    p.set_defaults(func=run)


def settings(args: argparse.Namespace) -> AgentConfig:
    try:
        return load_config({name: getattr(args, name, None) for name in SETTING_FLAGS}, config_file=args.config)
    except ConfigError as exc:
        raise UsageError(str(exc)) from None


def uses_builtin(config: AgentConfig) -> bool:
    """The built-in offline policy: `--model builtin`, which choose_model settles on when no model is named."""
    return config.model == BUILTIN


def model_client(config: AgentConfig, module: Path, log: Callable[[str], None] | None = None) -> ModelClient:
    """The model for one problem (chosen by name: agent.model_choice): an OpenAI-compatible endpoint,
    or the built-in offline policy (agent/builtin; it reads the problem module to recognize what it
    can write). Raises NoModelNamed, ModelError."""
    log = log or _stderr
    choose_model(config, log)
    if uses_builtin(config):
        from agent.builtin import BuiltinPolicy  # torch: it reads the problem module

        return BuiltinPolicy(module, entry=config.entry)
    return endpoint_client(config, log)


def endpoint_client(config: AgentConfig, log: Callable[[str], None] | None = None) -> OpenAIChatClient:
    """The configured OpenAI-compatible endpoint (config.model settled by choose_model)."""
    from agent.model import OpenAIChatClient, RetryPolicy

    return OpenAIChatClient(model=config.model or "", base_url=config.base_url, api_key=config.api_key,
                            timeout_s=config.request_timeout_s, temperature=config.temperature,
                            max_completion_tokens=config.max_completion_tokens, log=log or _stderr,
                            heartbeat_s=config.heartbeat_s,
                            retry=RetryPolicy(attempts=config.retry_attempts, base_s=config.retry_base_s,
                                              max_s=config.retry_max_s))


def _stderr(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def run(args: argparse.Namespace) -> int:
    config = settings(args)
    module = readable_file(args.module, "the problem module")
    if config.device is not None:  # named as it was given: the flag, RATCHET_DEVICE or the config file's key
        check_device(config.device, device_origin(config.device, config.sources()["device"]))
    if args.resume:
        from agent.runner import NothingToResume, resumable_run
        from agent.workspace import WorkspaceError

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
    try:
        client = model_client(config, module)
    except NoModelNamed as exc:
        raise UsageError(str(exc)) from None
    except ModelError as exc:
        print(f"ratchet optimize: {exc}", file=sys.stderr)
        return EXIT_MODEL
    unrecognized = getattr(client, "unrecognized", None)
    if unrecognized:  # the built-in policy has no kernel for it: one line, no attempt
        print(f"ratchet optimize: {unrecognized}", file=sys.stderr)
        return EXIT_UNRECOGNIZED
    from agent.builtin import NothingRecognized
    from agent.runner import NothingToResume, optimize
    from agent.workspace import WorkspaceError
    from tools.problem import ProblemError
    from tools.sandbox import SandboxUnavailable

    try:
        result = optimize(module, config, client, resume=args.resume)
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
                 f"{s['tokens_used']} tokens")
    if best is None:
        lines.append("best: no correct kernel in this run")
    elif best["speedup_vs_eager"] is None:
        lines.append(f"best: attempt {best['attempt']} (correct; timing not measured)")
    else:
        figures = [f"{best['speedup_vs_eager']:.2f}x vs eager"]
        if best["speedup_vs_compile"] is not None:
            figures.append(f"{best['speedup_vs_compile']:.2f}x vs torch.compile")
        if best["roofline_fraction"] is not None:
            figures.append(f"{best['roofline_fraction']:.0%} of the roofline floor")
        lines.append(f"best: attempt {best['attempt']}: " + ", ".join(figures))
    if best is not None and best.get("kept_eager"):  # agent/kept_eager.py
        lines.append(f"{NO_FASTER}: attempt {best['attempt']} is not faster than eager beyond noise; the reference "
                     f"stays the answer (ratchet best --reference writes it as ModelNew)")
    if s["best_path"]:
        lines.append(f"best file: {s['best_path']}")
    print("\n".join(lines))
