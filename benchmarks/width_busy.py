"""How busy is the GPU, and how soon is the best found, at width 1 against width N (issue 40)?

Two modes, each printing one row per width and the ratios against width 1:

- `--think S` (default 20): a model that takes S seconds per reply. A local server speaking the
  OpenAI protocol answers each request, after S seconds, with the built-in policy's next
  configuration for the conversation it was sent (so the candidates are real kernels, and every
  lineage gets another). Once the policy's space of configurations is spent it would answer with
  its best again, which the agent does not evaluate again (a repeat): the server then marks the
  source with a comment of its own, so that every reply is judged, as a real model's new kernel
  would be (counted as `restated`). `ratchet optimize --width W` runs against it, each width in a
  workspace of its own. Reported: wall seconds, judge_s (the union of the seconds the evaluator
  was judging: the GPU busy at most that long) and its share of the wall time.
Each problem is run once first, one attempt, and not reported: the first run pays the caches' fill.

- `--think 0`: the built-in policy itself (no server), as a user's first run: wall seconds, and the
  seconds to the commit of its final best, with the best's speedup.

Both `best_at_s` and `process_s` count from the start of the `ratchet optimize` process (the
commit's time has a resolution of one second); `wall_s` is the run's own (from its loop's start).

    python benchmarks/width_busy.py suite/11_row_softmax.py --widths 1,4 --max-attempts 8 --think 20
    python benchmarks/width_busy.py suite/11_row_softmax.py --widths 1,4,8 --device cuda:0,cuda:1   # two cards
    python benchmarks/width_busy.py suite/11_row_softmax.py --widths 4,8 --ahead      # requests sent ahead
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


class PolicyServer:
    """The built-in policy behind Chat Completions, answering each request after `think` seconds."""

    def __init__(self, problem: Path, think: float, precision: str = "fp32") -> None:
        from agent.builtin.policy import BuiltinPolicy

        self.policy = BuiltinPolicy(problem, precision=precision)
        self.think = think
        self.requests = 0
        self.restated = 0  # replies whose source had been sent before, marked so that they are judged again
        self.sent: set[str] = set()
        self.lock = threading.Lock()
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: object) -> None:
                pass

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)) or b"{}")
                server.requests += 1
                time.sleep(server.think)
                reply = server.policy.complete(body.get("messages") or [], body.get("tools") or [])
                message: dict[str, Any] = {"role": "assistant", "content": reply.content, "tool_calls": [
                    {"id": c.id, "type": "function", "function": {"name": c.name, "arguments": server.fresh(c.name, c.arguments)}}
                    for c in reply.tool_calls]}
                data = json.dumps({"id": f"w{server.requests}", "object": "chat.completion", "created": 0,
                                   "model": "policy", "choices": [{"index": 0, "message": message,
                                                                   "finish_reason": "tool_calls"}],
                                   "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}}).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self.http = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.http.daemon_threads = True
        threading.Thread(target=self.http.serve_forever, daemon=True).start()

    def fresh(self, name: str, arguments: str) -> str:
        """A submit_kernel call's arguments, its source marked when it was sent before."""
        if name != "submit_kernel":
            return arguments
        args = json.loads(arguments)
        with self.lock:
            if args.get("source") in self.sent:
                self.restated += 1
                args["source"] = f"{args['source'].rstrip()}\n# stand-in resubmission {self.restated}\n"
            self.sent.add(args.get("source"))
        return json.dumps(args)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.http.server_address[1]}/v1"

    def close(self) -> None:
        self.http.shutdown()
        self.http.server_close()


def run(problem: Path, width: int, args: argparse.Namespace, workspace: Path) -> dict[str, Any]:
    command = [sys.executable, "-m", "agent.cli", "optimize", str(problem), "--workspace", str(workspace), "--json",
               "--width", str(width), "--max-attempts", str(args.max_attempts), "--patience", "0",
               "--roofline-target", "0", "--memory-roofline-target", "0",
               "--precision", args.precision]
    for flag in ("device", "ray", "judges"):  # where the candidates are judged
        if getattr(args, flag) is not None:
            command += [f"--{flag}", str(getattr(args, flag))]
    if args.beam is not None:
        command += ["--beam", str(min(args.beam, width))]
    if args.ahead:
        command += ["--ahead", "on"]
    server = None
    if args.think > 0:
        server = PolicyServer(problem, args.think, args.precision)
        command += ["--model", "policy", "--base-url", server.url]
    started = time.time()
    try:
        done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True)
    finally:
        process_s = round(time.time() - started, 1)
        if server is not None:
            server.close()
    if not done.stdout.strip():
        raise SystemExit(f"width {width}: ratchet optimize printed nothing (exit {done.returncode}):\n{done.stderr[-2000:]}")
    summary = json.loads(done.stdout)
    best_at = None
    if summary.get("best"):
        sha = summary["best"]["sha"]
        stamp = subprocess.run(["git", "-C", summary["workspace"], "log", "-1", "--format=%ct", sha],
                               capture_output=True, text=True, check=True).stdout.strip()
        best_at = int(stamp) - started
    return {"width": width, "wall_s": summary["wall_s"], "judge_s": summary["judge_s"],
            "judge_share": summary["judge_share"], "attempts": summary["attempts"], "model_calls": summary["model_calls"],
            "best_speedup": (summary.get("best") or {}).get("speedup_vs_eager"), "best_at_s": best_at,
            "process_s": process_s, "restated": server.restated if server is not None else 0, "exit": done.returncode}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("problems", nargs="+", type=Path)
    parser.add_argument("--widths", default="1,4")
    parser.add_argument("--max-attempts", type=int, default=8)
    parser.add_argument("--think", type=float, default=20.0, help="seconds per model reply (0: the built-in policy itself)")
    parser.add_argument("--precision", default="fp32")
    parser.add_argument("--device", help="passed to ratchet optimize: cuda:0,cuda:1 judges on two cards at once")
    parser.add_argument("--beam", type=int, help="passed to ratchet optimize (default: half the width)")
    parser.add_argument("--ray", help="passed to ratchet optimize: judge on a Ray cluster's GPUs")
    parser.add_argument("--judges", type=int, help="passed to ratchet optimize with --ray")
    parser.add_argument("--ahead", action="store_true", help="--ahead on: each lineage asks again once judged")
    args = parser.parse_args()
    widths = [int(w) for w in args.widths.split(",")]
    for problem in args.problems:
        with tempfile.TemporaryDirectory() as tmp:  # the first run of a problem fills caches (Triton's, bytecode)
            warm = argparse.Namespace(**{**vars(args), "max_attempts": 1, "think": 0.0})
            run(problem.resolve(), 1, warm, Path(tmp))
        rows = []
        for width in widths:
            with tempfile.TemporaryDirectory() as tmp:
                rows.append(run(problem.resolve(), width, args, Path(tmp)))
            print(json.dumps({"problem": problem.name, "think_s": args.think, "ahead": args.ahead, **rows[-1]}), flush=True)
        first = rows[0]
        for row in rows[1:]:
            share = (row["judge_share"] or 0) / first["judge_share"] if first["judge_share"] else None
            wall = row["wall_s"] / first["wall_s"] if first["wall_s"] else None
            best = (row["best_at_s"] / first["best_at_s"]) if row["best_at_s"] and first["best_at_s"] else None
            print(f"{problem.name}: width {row['width']} against 1: judge share {row['judge_share']} against "
                  f"{first['judge_share']} ({share and f'{share:.2f}x'}), wall {wall and f'{wall:.2f}x'}, "
                  f"best found at {best and f'{best:.2f}x'} the seconds (speedups {row['best_speedup']} against "
                  f"{first['best_speedup']})", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
