"""The agent settings `ratchet optimize` and `ratchet batch` both take, declared once.

Each is a flag whose destination is the AgentConfig field it sets (agent/config.py, docs/config.md);
`settings` reads them over the environment and the config file. A budget reads "of the run" for
optimize and "per problem" for a batch (each problem a run of its own).
"""
from __future__ import annotations

import argparse
from dataclasses import dataclass
from typing import Any

from agent.cli.checks import UsageError
from agent.config import AgentConfig, ConfigError, load_config
from tools.options import SANDBOX_MODES
from tools.precision import PRECISIONS


@dataclass(frozen=True)
class Setting:
    flag: str
    dest: str
    help: str  # "{scope}" reads "of the run" or "per problem"
    type: Any = None
    metavar: str | None = None
    choices: tuple[str, ...] | None = None


SETTINGS = (
    Setting("--model", "model", "model name at the endpoint ($RATCHET_MODEL); 'builtin' (the default when no "
            "model is named and no endpoint is given) is the built-in offline policy", metavar="NAME"),
    Setting("--base-url", "base_url", "OpenAI-compatible endpoint ($OPENAI_BASE_URL); without --model, the one "
            "model it lists", metavar="URL"),
    Setting("--request-timeout", "request_timeout_s", "give up on one model request after SECONDS (default 120; a "
            "timed-out request is tried twice)", float, "SECONDS"),
    Setting("--max-attempts", "max_attempts", "attempt budget {scope}, malformed replies included (default 20)",
            int, "N"),
    Setting("--language", "language", "kernel language (default triton)", choices=("triton", "cuda")),
    Setting("--workspace", "workspace", "workspace root (default $RATCHET_WORKSPACE, else ./workspaces)",
            metavar="DIR"),
    Setting("--max-tokens", "max_tokens", "token budget {scope} (default 2000000)", int, "N"),
    Setting("--max-wall-s", "max_wall_s", "wall-time budget {scope} in seconds (default 14400)", float, "S"),
    Setting("--width", "width", "candidates per step {scope}, each its own conversation, asked and judged at once "
            "(default 1; docs/search.md)", int, "N"),
    Setting("--beam", "beam", "the best K lineages carried to the next step, forked to fill the width (default: "
            "half the width)", int, "K"),
    Setting("--ahead", "ahead", "on: in a wide search, each lineage's next request goes out as soon as its "
            "candidate is judged, before the step's other candidates are (default off; a request for a lineage the "
            "beam then drops is paid for and unused; docs/search.md)", choices=("on", "off")),
    Setting("--patience", "patience", "stop after N attempts without a new best (0: never)", int, "N"),
    Setting("--roofline-target", "roofline_target", "stop when the best, faster than eager, reaches F of the "
            "roofline floor (default 0.9; 0: never)", float, "F"),
    Setting("--memory-roofline-target", "memory_roofline_target", "the same for a memory-bound problem "
            "(default 0.8)", float, "F"),
    Setting("--context-tokens", "context_tokens", "context budget of one request (default 32000)", int, "N"),
    Setting("--trials", "trials", "correctness trials per attempt (default 5)", int, "N"),
    Setting("--precision", "precision", "float32 arithmetic of the baselines, the workers and the built-in policy's "
            "dots: fp32 (default; IEEE, TF32 off) or tf32 (TF32 tensor cores admitted); docs/precision.md",
            choices=PRECISIONS),
    Setting("--price", "price", "the model's price in US dollars per million tokens: INPUT,OUTPUT[,CACHED_INPUT] "
            "(wins over the config file's [prices] table; none is built in; docs/config.md)", metavar="IN,OUT[,CACHED]"),
    Setting("--sandbox", "sandbox", "confinement of candidate code: required (default; refuse without it) or "
            "best-effort (docs/sandbox.md)", choices=SANDBOX_MODES),
)


def add_settings(parser: argparse.ArgumentParser, scope: str) -> None:
    """The shared settings as flags of `parser`, and --config."""
    for s in SETTINGS:
        kwargs: dict[str, Any] = {"dest": s.dest, "help": s.help.format(scope=scope)}
        if s.type is not None:
            kwargs["type"] = s.type
        if s.metavar is not None:
            kwargs["metavar"] = s.metavar
        if s.choices is not None:
            kwargs["choices"] = s.choices
        parser.add_argument(s.flag, **kwargs)
    parser.add_argument("--config", metavar="FILE", help="TOML config file (default $RATCHET_CONFIG, else ./ratchet.toml)")


def given(args: argparse.Namespace) -> dict[str, Any]:
    """The shared settings given on the command line (None: not given)."""
    return {s.dest: getattr(args, s.dest) for s in SETTINGS if getattr(args, s.dest, None) is not None}


def settings(args: argparse.Namespace, extra: tuple[str, ...] = ()) -> AgentConfig:
    """AgentConfig from the shared flags (and the command's own `extra` fields) over the environment
    and the config file; a bad value is a UsageError naming it."""
    flags = {s.dest: getattr(args, s.dest, None) for s in SETTINGS}
    flags.update({name: getattr(args, name, None) for name in extra})
    try:
        return load_config(flags, config_file=args.config)
    except ConfigError as exc:
        raise UsageError(str(exc)) from None
