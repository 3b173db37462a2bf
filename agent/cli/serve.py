"""`ratchet serve PROBLEMS...`: the multi-turn environment as an OpenEnv server (agent/learn/env_server.py).

PROBLEMS are problem files or suite directories; an episode resets to one of them by name (the
file's stem). Episodes are WebSocket sessions at ws://HOST:PORT/ws, as OpenEnv's client holds
them; GET /health, /metadata and /schema answer plain HTTP. At most --max-sessions episodes run at
once (a GPU slot each); the next connection is told so and closed. Runs until Ctrl-C or SIGTERM.
Exit codes: 130 stopped by Ctrl-C or SIGTERM, 2 usage error (no problems, a bad port or option, the port taken), 3 a
problem file that is not a valid problem, 13 the required OS sandbox is not available.
"""
from __future__ import annotations

import argparse
import signal
import sys
from typing import Any, NoReturn

from agent.cli.checks import UsageError, check_device
from agent.cli.exit_codes import EXIT_BAD_PROBLEM, EXIT_INTERRUPTED, EXIT_SANDBOX
from tools.precision import PRECISIONS


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("serve", help="serve the multi-turn environment to RL trainers (OpenEnv's protocol)",
                              description=__doc__.split("\n\n")[0])
    p.add_argument("problems", nargs="+", metavar="PROBLEMS", help="problem files or suite directories")
    p.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1)")
    p.add_argument("--port", type=int, default=8000, help="port to listen on (default 8000; 0: any free one)")
    p.add_argument("--max-sessions", type=int, default=4, metavar="N", help="episodes at once (default 4)")
    p.add_argument("--max-attempts", type=int, default=20, metavar="N", help="attempts per episode (default 20)")
    p.add_argument("--idle-timeout", type=float, default=600.0, metavar="S",
                   help="close a session that sends nothing for S seconds (default 600)")
    p.add_argument("--device", help="evaluation device (default: cuda:0 when there is a GPU, else cpu)")
    p.add_argument("--precision", choices=PRECISIONS, default="fp32", help="the baselines' float32 arithmetic, or the half type the problem is cast to")
    p.add_argument("--sandbox", choices=("required", "best-effort"), default="required", help="the candidates' sandbox")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from agent.learn.env_server import EnvServer, ServerConfig
    from agent.learn.harbor import HarborError, problems_of
    from tools.problem import ProblemError, read_problem
    from tools.sandbox import SandboxUnavailable

    if not 0 <= args.port <= 65535:
        raise UsageError(f"--port {args.port}: not a port (0 to 65535)")
    if args.max_sessions < 1 or args.max_attempts < 1:
        raise UsageError("--max-sessions and --max-attempts must be at least 1")
    if not args.idle_timeout > 0:
        raise UsageError(f"--idle-timeout {args.idle_timeout:g}: must be positive")
    device = check_device(args.device, f"--device {args.device}") if args.device else None
    try:
        problems = problems_of(args.problems)
    except HarborError as exc:
        raise UsageError(str(exc)) from None
    names = [p.stem for p in problems]
    if len(set(names)) != len(names):
        raise UsageError(f"two problems share a name: {', '.join(sorted({n for n in names if names.count(n) > 1}))}")
    for problem in problems:
        try:
            read_problem(problem, "Model")
        except ProblemError as exc:
            print(f"ratchet serve: {problem}: {exc}", file=sys.stderr)
            return EXIT_BAD_PROBLEM
    config = ServerConfig(problems=problems, host=args.host, port=args.port, max_sessions=args.max_sessions,
                          idle_timeout_s=args.idle_timeout,
                          env={"max_attempts": args.max_attempts},
                          reward={"device": device, "precision": args.precision, "spares": args.max_sessions,
                                  "eval_options": {"sandbox": args.sandbox}})
    try:
        server = EnvServer(config).start()
    except SandboxUnavailable as exc:
        print(f"ratchet serve: {exc}", file=sys.stderr)
        return EXIT_SANDBOX
    except OSError as exc:
        raise UsageError(f"cannot listen on {args.host}:{args.port}: {exc.strerror or exc}") from None
    print(f"ratchet serve: {len(problems)} problem(s) at ws://{args.host}:{server.port}/ws "
          f"(at most {args.max_sessions} episodes at once); Ctrl-C stops", file=sys.stderr, flush=True)
    signal.signal(signal.SIGTERM, _interrupt)  # a service manager's stop, or `kill`, as Ctrl-C
    signal.signal(signal.SIGINT, _interrupt)  # also where a shell started it in the background (SIGINT ignored)
    try:
        assert server._thread is not None
        server._thread.join()
    except KeyboardInterrupt:
        return EXIT_INTERRUPTED
    finally:
        server.close()
    return EXIT_INTERRUPTED


def _interrupt(signum: int, frame: Any) -> NoReturn:
    raise KeyboardInterrupt
