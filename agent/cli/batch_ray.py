"""`ratchet batch --ray ADDRESS`: the command's Ray half (agent/cli/batch.py calls it).

It checks the flags, connects to the cluster (agent.batch.ray_slots.connect), makes the driver's
WorkspaceService (agent.batch.service) over this machine's workspace, and runs the batch with a
RayScheduler whose tasks run agent.batch.remote.run_remote_problem on the nodes. run.json records
the executor and the address; every row records the executor, node and GPU. The nodes' agent log
lines come back through the service into `logs/<problem>.log`; the service's own faults go to
`logs/service.log`.
"""
from __future__ import annotations

import argparse
import contextlib
import os
import shlex
import signal
import sys
import time
from collections.abc import Callable
from pathlib import Path

from agent.batch.driver import pending, run_batch
from agent.batch.local import Slot
from agent.batch.log import LOGS, RESULTS, RunLog
from agent.batch.problem import make_spec, problem_key
from agent.batch.scale import SCALE_VAR
from agent.cli.checks import UsageError, ray_installed
from agent.cli.exit_codes import EXIT_CLUSTER, EXIT_INTERRUPTED


def check_ray_args(args: argparse.Namespace) -> list[Slot]:
    """The flags that go with --ray, and the slots run.json names (CPU slots, or the cluster's GPUs)."""
    if args.gpus:
        raise UsageError("give --ray or --gpus, not both: on a cluster every problem takes one GPU Ray assigns")
    if args.cpu_workers is not None and args.cpu_workers < 1:
        raise UsageError("--cpu-workers must be at least 1")
    if args.api_key_env is not None and not args.api_key_env.strip():
        raise UsageError("--api-key-env names no variable")
    ray_installed()
    if args.cpu_workers is not None:
        return [Slot.cpu(i) for i in range(args.cpu_workers)]
    return [Slot("Ray GPUs", "cuda:0")]


def run_on_ray(args: argparse.Namespace, suite: Path, problems: list[Path], settings: dict, slots: list[Slot],
               out: Path, write: Callable[[str], None], open_run: Callable[[dict], dict],
               finish: Callable[..., int]) -> int:
    """Connect, open the run directory, run every pending problem on the cluster, finish. Ray's
    driver prints its raylets' messages (a worker died, a task is retried) on stdout, which is the
    summary's: they go to stderr while Ray is connected."""
    with contextlib.redirect_stdout(sys.stderr):
        code = _session(args, suite, problems, settings, slots, out, write, open_run)
    return finish(suite, problems, RunLog(out / RESULTS), out, write) if code is None else code


def _session(args: argparse.Namespace, suite: Path, problems: list[Path], settings: dict, slots: list[Slot],
             out: Path, write: Callable[[str], None], open_run: Callable[[dict], dict]) -> int | None:
    """The part connected to Ray: an exit code, or None when the batch ran to its end."""
    import ray

    from agent.batch.ray_slots import ClusterError, RayScheduler, connect
    from agent.batch.remote import run_remote_problem
    from agent.batch.service import WorkspaceService

    try:
        info = connect(args.ray, cpu_workers=args.cpu_workers, code=args.ray_code)
    except ClusterError as exc:
        print(f"ratchet batch: {exc}", file=sys.stderr)
        return EXIT_CLUSTER
    scheduler = service = None
    try:
        if args.cpu_workers is None and not info["cluster_gpus"]:
            print(f"ratchet batch: --ray {args.ray}: the cluster has no GPU: run on its CPUs with --cpu-workers N",
                  file=sys.stderr)
            return EXIT_CLUSTER
        meta = open_run({"executor": "ray", "address": args.ray, "ray": info})
        log = RunLog(out / RESULTS)
        log.repair()
        todo, done = pending(problems, log, resume=args.resume)
        session = f"{meta['sessions'][-1]['started_at']:.3f}-{os.getpid()}"
        # the nodes' agent log lines land in logs/<problem>.log, as a local run's do
        service = WorkspaceService(Path(settings["workspace"]), {problem_key(p): p for p in problems}, session,
                                   log=lambda line: _append(out / LOGS / "service.log", line), logs=out / LOGS)
        # the suite's size switch is the driver's choice (chosen here or set in its environment), not the node's
        chosen = slots[0].env.get(SCALE_VAR) or os.environ.get(SCALE_VAR)
        scale = {SCALE_VAR: chosen} if chosen else {}
        scheduler = RayScheduler(service.handle, cpu_slots=args.cpu_workers, env=scale,
                                 api_key_env=args.api_key_env, warn=write)
        # resume=True: a task retried after its worker died continues the run it began (the lease says whether
        # one is unfinished since this batch run started), as --resume does after the driver died
        specs = [make_spec(p, device=scheduler.device, settings=settings, resume=True,
                           since=meta["started_at"]) for p in todo]
        write(f"batch: {len(problems)} problem(s) from {suite}, {done} already done; Ray at {args.ray}: "
              f"{info['nodes']} node(s), {scheduler.describe()}; results in {out / RESULTS}")
        previous = signal.signal(signal.SIGTERM, _interrupt)
        try:
            run_batch(specs, scheduler, log, total=len(problems), done=done, write=write, fn=run_remote_problem)
        except KeyboardInterrupt:
            from agent.cli.batch import resume_command

            write(f"batch: interrupted; continue with: {resume_command(suite, out, args.filter)} --ray {shlex.quote(args.ray)}")
            return EXIT_INTERRUPTED
        finally:
            scheduler = None  # run_batch shut it down
            signal.signal(signal.SIGTERM, previous)
        return None
    finally:
        if scheduler is not None:
            scheduler.shutdown(cancel=True)
        if service is not None:
            service.close()
        ray.shutdown()


def _append(path: Path, line: str) -> None:
    with open(path, "a") as f:
        f.write(f"{time.strftime('%Y-%m-%d %H:%M:%S')} {line}\n")


def _interrupt(signum, frame) -> None:  # SIGTERM: stop like Ctrl-C (tasks cancelled, run resumable)
    raise KeyboardInterrupt
