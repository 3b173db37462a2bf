"""Every exit code of the `ratchet` command line, in one table: `TABLE` (documented, one table per
command, in docs/exit-codes.md; tests/cli/test_exit_codes.py keeps the two in step).

The table lives in tools/ because tools/ never imports agent/, while the agent's commands import
tools freely. Each code has one constant here; no module of agent/ or tools/ writes an exit code
as a literal. One number can mean different things to different commands (1 is `incorrect` for
`ratchet eval` but "some problems have no result" for `ratchet batch`): `TABLE` says which
commands use which constant.
"""
from __future__ import annotations

from dataclasses import dataclass

from tools.record import Verdict

# every command
EXIT_OK = 0  # success: what the command was asked to do was done
EXIT_USAGE = 2  # usage error: bad option or device, unreadable or missing file, whatever its role (one line on stderr)
EXIT_INTERRUPTED = 130  # interrupted (Ctrl-C, or SIGTERM for `ratchet batch`); resumable where the command says so

# `ratchet eval` (per verdict: EVAL_EXIT_CODES) and `ratchet optimize`
EXIT_INCORRECT = 1  # incorrect: an output (or an input after forward) differs from the reference
EXIT_BAD_PROBLEM = 3  # the reference file exists but is not a valid problem (one line on stderr says why)
EXIT_REJECTED = 4  # rejected: a guard rule or a run-time integrity check
EXIT_COMPILE_ERROR = 5  # compile_error: syntax, import, no ModelNew, constructor mismatch, Triton or nvcc error
EXIT_RUNTIME_ERROR = 6  # runtime_error: raised while building or running (including out of memory)
EXIT_TIMEOUT = 7  # timeout: past its time limit (host or device hang); the process group was killed
EXIT_CRASHED = 8  # crashed: the candidate's worker died without answering (segfault, os._exit, sys.exit)
EXIT_INTERNAL = 9  # an evaluator fault or internal error of ratchet (verdict error): never the candidate's fault
EXIT_SANDBOX = 13  # the required OS sandbox is not available on this machine; --sandbox best-effort runs weaker

# `ratchet optimize`
EXIT_FOUND = EXIT_OK  # a correct kernel was found in this run
EXIT_NONE_CORRECT = 10  # the run ended (a budget spent, or an early stop) with no correct kernel
EXIT_MODEL = 11  # the model endpoint was unreachable after retries, or refused the request (400, 401, 404)
EXIT_UNRECOGNIZED = 12  # the built-in policy recognizes nothing in the module; nothing was attempted

# `ratchet batch`, `ratchet suite check`
EXIT_INCOMPLETE = 1  # batch: some problems have no final result (a worker crashed, the endpoint failed)
EXIT_FLAGGED = 1  # suite check: at least one problem flagged (an error or a warning)

# `ratchet best`
EXIT_KEPT_EAGER = 14  # no correct attempt is faster than eager PyTorch beyond noise: nothing written (--reference writes the reference)

# `ratchet batch --ray`
EXIT_CLUSTER = 15  # the Ray cluster named by --ray could not be reached or started, or cannot run the batch or judges (GPUs)

# `ratchet extract`, `ratchet apply`
EXIT_USER_MODEL = 16  # the user's model (or its inputs function) could not be imported, built or run forward
EXIT_NOT_APPLIED = 17  # apply: a kept kernel could not be put into the model, or the patched model raised

# the batch's worker process (agent/batch/local.py), read by the batch driver, never by a user
EXIT_PARENT_GONE = 137  # the batch process that started this worker is gone; the worker stopped at once

# `ratchet eval`: the exit code of each verdict
EVAL_EXIT_CODES: dict[Verdict, int] = {
    Verdict.OK: EXIT_OK,
    Verdict.INCORRECT: EXIT_INCORRECT,
    Verdict.REJECTED: EXIT_REJECTED,
    Verdict.COMPILE_ERROR: EXIT_COMPILE_ERROR,
    Verdict.RUNTIME_ERROR: EXIT_RUNTIME_ERROR,
    Verdict.TIMEOUT: EXIT_TIMEOUT,
    Verdict.CRASHED: EXIT_CRASHED,
    Verdict.ERROR: EXIT_INTERNAL,
}


@dataclass(frozen=True)
class ExitCode:
    """One row of the table: a constant's name and value, the commands that use it, and what it means there."""

    name: str
    code: int
    commands: tuple[str, ...]
    meaning: str


# the commands, named as docs/exit-codes.md heads their tables
EVAL, OPTIMIZE, BATCH, REPORT = "ratchet eval", "ratchet optimize", "ratchet batch", "ratchet report"
EXPORT, SUITE, WORKSPACE = "ratchet export", "ratchet suite check", "ratchet log / show / best"
SERVE, EXTRACT, APPLY = "ratchet serve", "ratchet extract", "ratchet apply"
WORKER = "batch worker process"
COMMANDS = (EVAL, OPTIMIZE, BATCH, REPORT, EXPORT, SUITE, WORKSPACE, SERVE, EXTRACT, APPLY, WORKER)
ALL = (EVAL, OPTIMIZE, BATCH, REPORT, EXPORT, SUITE, WORKSPACE, SERVE, EXTRACT, APPLY)

TABLE: tuple[ExitCode, ...] = (
    ExitCode("EXIT_OK", EXIT_OK, (EVAL, BATCH, REPORT, EXPORT, SUITE, WORKSPACE, EXTRACT, APPLY, WORKER),
             "success (eval: verdict ok; batch: every problem has a final result; suite check: nothing flagged)"),
    ExitCode("EXIT_FOUND", EXIT_FOUND, (OPTIMIZE,), "a correct kernel was found in this run"),
    ExitCode("EXIT_INCORRECT", EXIT_INCORRECT, (EVAL, APPLY),
             "incorrect: an output (or an input after forward) differs from the reference"),
    ExitCode("EXIT_INCOMPLETE", EXIT_INCOMPLETE, (BATCH,),
             "some problems have no final result (a worker crashed, the model endpoint failed); --resume retries them"),
    ExitCode("EXIT_FLAGGED", EXIT_FLAGGED, (SUITE,),
             "at least one problem flagged (an error or a warning; a broken problem file is an error)"),
    ExitCode("EXIT_USAGE", EXIT_USAGE, ALL,
             "usage error: bad option or setting (a device that is malformed or not on this machine too), "
             "unreadable or missing file, whatever its role"),
    ExitCode("EXIT_BAD_PROBLEM", EXIT_BAD_PROBLEM, (EVAL, OPTIMIZE, EXPORT, SERVE),
             "the reference file exists but is not a valid problem (one line on stderr says why)"),
    ExitCode("EXIT_REJECTED", EXIT_REJECTED, (EVAL,), "rejected: a guard rule or a run-time integrity check"),
    ExitCode("EXIT_COMPILE_ERROR", EXIT_COMPILE_ERROR, (EVAL,),
             "compile_error: syntax, import, no ModelNew, constructor mismatch, Triton or nvcc error"),
    ExitCode("EXIT_RUNTIME_ERROR", EXIT_RUNTIME_ERROR, (EVAL,),
             "runtime_error: raised while building or running (including out of memory)"),
    ExitCode("EXIT_TIMEOUT", EXIT_TIMEOUT, (EVAL,),
             "timeout: past its time limit (host or device hang); the process group was killed"),
    ExitCode("EXIT_CRASHED", EXIT_CRASHED, (EVAL,),
             "crashed: the candidate's worker died without answering (segfault, os._exit, sys.exit)"),
    ExitCode("EXIT_INTERNAL", EXIT_INTERNAL, (EVAL,),
             "an evaluator fault or an internal error of ratchet (verdict error; one line on stderr): "
             "never the candidate's fault"),
    ExitCode("EXIT_NONE_CORRECT", EXIT_NONE_CORRECT, (OPTIMIZE,),
             "the run ended (a budget spent, or an early stop) with no correct kernel"),
    ExitCode("EXIT_MODEL", EXIT_MODEL, (OPTIMIZE, BATCH),
             "the model endpoint was unreachable after retries, did not answer within the request timeout, or "
             "refused the request (HTTP 400, 401, 404); continue later with --resume"),
    ExitCode("EXIT_UNRECOGNIZED", EXIT_UNRECOGNIZED, (OPTIMIZE,),
             "the built-in policy recognizes nothing in the module; nothing was attempted (one line says why)"),
    ExitCode("EXIT_SANDBOX", EXIT_SANDBOX, (EVAL, OPTIMIZE, BATCH, SERVE),
             "the required OS sandbox is not available on this machine (one line on stderr names what is missing); "
             "use --sandbox best-effort to run with weaker isolation"),
    ExitCode("EXIT_KEPT_EAGER", EXIT_KEPT_EAGER, (WORKSPACE,),
             "best: no kernel faster than PyTorch: the best attempt and eager were both timed and the attempt is not "
             "faster beyond noise; nothing is written (one line on stderr says why); --reference writes the "
             "reference as ModelNew instead (exit 0)"),
    ExitCode("EXIT_CLUSTER", EXIT_CLUSTER, (OPTIMIZE, BATCH),
             "--ray: the Ray cluster could not be reached or started, or has no GPU for a GPU run (optimize: fewer "
             "GPUs than --judges); one line on stderr says which; nothing was run and no run directory was written"),
    ExitCode("EXIT_NOT_APPLIED", EXIT_NOT_APPLIED, (APPLY,),
             "a kept kernel could not be put into the model (its ModelNew raised while built, loading the module's "
             "state dict, or in the patched forward); one line on stderr"),
    ExitCode("EXIT_USER_MODEL", EXIT_USER_MODEL, (EXTRACT, APPLY),
             "the user's model could not be built, or importing its module, its inputs function or its forward "
             "raised (one line on stderr names the option and the exception)"),
    ExitCode("EXIT_INTERRUPTED", EXIT_INTERRUPTED, ALL + (WORKER,),
             "interrupted (Ctrl-C; SIGTERM for batch); optimize and batch continue with --resume"),
    ExitCode("EXIT_PARENT_GONE", EXIT_PARENT_GONE, (WORKER,),
             "the batch process that started this worker is gone; the worker stopped at once"),
)


def codes_of(command: str) -> dict[int, str]:
    """code -> constant name, for one command of COMMANDS."""
    if command not in COMMANDS:
        raise ValueError(f"unknown command {command!r}; expected one of {', '.join(COMMANDS)}")
    return {row.code: row.name for row in TABLE if command in row.commands}
