"""Every user error is one line on stderr and a documented exit code, in every command.

Each case runs the real command in a subprocess (`python -m agent.cli`) and checks the exit
code, that stderr is exactly one line, and that no traceback was printed: a bad or unavailable
device (flag, environment, config file), a missing file whatever its role, broken problem files
under `suite check`, `report` on something that is not a run, and `--resume` with nothing to
resume.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from agent.cli.exit_codes import EXIT_BAD_PROBLEM, EXIT_FLAGGED, EXIT_USAGE
from helpers_cli import one_line

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = str(ROOT / "examples" / "swish_problem.py")
CANDIDATE = str(ROOT / "examples" / "swish_candidate.py")
BAD = ROOT / "tests" / "problems" / "bad"
NO_SUCH_GPU = "cuda:99"  # no machine this runs on has 100 GPUs


def ratchet(*args: str, cwd: Path = ROOT, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    base = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "RATCHET_"))}
    return subprocess.run([sys.executable, "-m", "agent.cli", *args], cwd=cwd, env={**base, **(env or {})},
                          capture_output=True, text=True, timeout=240)


# --- devices: one check (agent.cli.checks.check_device) for every command -----------------------

DEVICE_CASES = [  # (arguments, environment, what the line must name)
    (["optimize", EXAMPLE, "--device", NO_SUCH_GPU], {}, f"ratchet optimize: --device {NO_SUCH_GPU}: "),
    (["optimize", EXAMPLE, "--device", "tpu"], {}, "ratchet optimize: --device tpu: expected cpu, cuda or cuda:N"),
    (["optimize", EXAMPLE], {"RATCHET_DEVICE": "tpu"}, "ratchet optimize: RATCHET_DEVICE=tpu: expected cpu"),
    (["optimize", EXAMPLE], {"RATCHET_DEVICE": NO_SUCH_GPU}, f"ratchet optimize: RATCHET_DEVICE={NO_SUCH_GPU}: "),
    (["eval", EXAMPLE, CANDIDATE, "--device", NO_SUCH_GPU], {}, f"ratchet eval: --device {NO_SUCH_GPU}: "),
    (["eval", EXAMPLE, CANDIDATE, "--device", "tpu"], {}, "ratchet eval: --device tpu: expected cpu"),
    (["suite", "check", str(ROOT / "tests" / "rl_problems" / "suite"), "--device", NO_SUCH_GPU], {},
     f"ratchet suite check: --device {NO_SUCH_GPU}: "),
    (["export", str(ROOT / "workspaces"), "--format", "rl", "--device", NO_SUCH_GPU], {},
     f"ratchet export: --device {NO_SUCH_GPU}: "),
    (["export", str(ROOT / "workspaces"), "--format", "rl", "--device", "tpu"], {}, "ratchet export: --device tpu: "),
    (["batch", str(ROOT / "suite"), "--gpus", "99"], {}, "ratchet batch: --gpus 99: "),
]


@pytest.mark.parametrize("args,env,says", DEVICE_CASES, ids=[s.split(": ", 1)[1][:30] + f" ({a[0]})"
                                                              for a, _, s in DEVICE_CASES])
def test_a_bad_or_unavailable_device_is_one_line(args, env, says):
    one_line(ratchet(*args, env=env), EXIT_USAGE, says)


def test_a_device_from_the_config_file_is_named_there(tmp_path):
    config = tmp_path / "ratchet.toml"
    config.write_text('[optimize]\ndevice = "tpu"\n')
    one_line(ratchet("optimize", EXAMPLE, "--config", str(config)), EXIT_USAGE,
             f"config file {config}: device = 'tpu': expected cpu, cuda or cuda:N")


@pytest.mark.skipif(torch.cuda.is_available(), reason="`cuda` is a good device on a machine with a GPU")
@pytest.mark.parametrize("command", [["optimize", EXAMPLE], ["eval", EXAMPLE, CANDIDATE]], ids=["optimize", "eval"])
def test_cuda_on_a_machine_without_a_gpu(command):
    one_line(ratchet(*command, "--device", "cuda"), EXIT_USAGE, "--device cuda: no CUDA GPU is available on this machine")


# --- files: missing or unreadable is a usage error whatever the file's role -------------------------

MISSING = [
    (["eval", "no_such_problem.py", CANDIDATE], "ratchet eval: no_such_problem.py: cannot read the reference: no such file"),
    (["eval", EXAMPLE, "no_such_candidate.py"], "ratchet eval: no_such_candidate.py: cannot read the candidate: no such file"),
    (["eval", str(ROOT / "examples"), CANDIDATE], "cannot read the reference: not a file"),
    (["optimize", "no_such_problem.py"], "ratchet optimize: no_such_problem.py: cannot read the problem module: no such file"),
    (["optimize", EXAMPLE, "--config", "no_such.toml"], "ratchet optimize: config file no_such.toml not found"),
    (["batch", "no_such_suite"], "ratchet batch: no_such_suite: not a directory"),
    (["report", "no_such_run"], "ratchet report: no_such_run: no results.jsonl"),
    (["export", "no_such_workspace"], "ratchet export: no_such_workspace: no such directory"),
    (["suite", "check", "no_such_dir"], "ratchet suite check: no_such_dir: no such directory"),
    (["best", "no_such_problem.py", "--workspace", "no_such_root"], "ratchet best: no problem file or workspace"),
]


@pytest.mark.parametrize("args,says", MISSING, ids=[" ".join(a[:2]) for a, _ in MISSING])
def test_a_missing_file_is_a_usage_error_in_every_command(args, says):
    one_line(ratchet(*args), EXIT_USAGE, says)


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads files whatever their mode")
def test_an_unreadable_file_is_a_usage_error(tmp_path):
    locked = tmp_path / "locked.py"
    locked.write_text(Path(EXAMPLE).read_text())
    locked.chmod(0)
    one_line(ratchet("eval", str(locked), CANDIDATE), EXIT_USAGE, "cannot read the reference")
    one_line(ratchet("eval", EXAMPLE, str(locked)), EXIT_USAGE, "cannot read the candidate")


def test_a_reference_that_is_not_a_problem_is_a_bad_problem():
    """Not a usage error: the file is there and readable, but no valid problem."""
    for command in (["eval", str(BAD / "no_model.py"), CANDIDATE], ["optimize", str(BAD / "syntax_error.py")]):
        one_line(ratchet(*command), EXIT_BAD_PROBLEM, "syntax error at line" if "optimize" in command else "no class Model")


# --- suite check fails on broken problem files ----------------------------------------------------

def test_suite_check_flags_broken_problem_files(tmp_path):
    (tmp_path / "syntax.py").write_text((BAD / "syntax_error.py").read_text())
    (tmp_path / "no_get_inputs.py").write_text((BAD / "no_get_inputs.py").read_text())
    no_init = "import torch\nclass Model(torch.nn.Module):\n    def forward(self, x):\n        return x * 2\n" \
              "def get_inputs():\n    return [torch.randn(4)]\n"
    (tmp_path / "no_get_init_inputs.py").write_text(no_init)
    (tmp_path / "helpers.py").write_text("def size():\n    return 16\n")  # defines none of it: a helper, skipped
    proc = ratchet("suite", "check", str(tmp_path), "--json", "--device", "cpu")
    assert proc.returncode == EXIT_FLAGGED and proc.stderr == "", proc.stderr
    reports = {r["name"]: r for r in map(json.loads, proc.stdout.splitlines())}
    for name, why in (("syntax.py", "syntax error at line"), ("no_get_inputs.py", "without get_inputs()"),
                      ("no_get_init_inputs.py", "without get_init_inputs()")):
        assert reports[name]["status"] == "invalid" and reports[name]["flagged"], reports[name]
        [flag] = reports[name]["flags"]
        assert (flag["kind"], flag["severity"]) == ("invalid", "error") and why in flag["detail"], flag
    assert reports["helpers.py"]["status"] == "skipped" and not reports["helpers.py"]["flagged"]
    table = ratchet("suite", "check", str(tmp_path), "--device", "cpu")
    assert table.returncode == EXIT_FLAGGED and "3 of 3 problem(s) flagged" in table.stdout, table.stdout


# --- report on something that is not a run --------------------------------------------------------

@pytest.mark.parametrize("what", ["problem file", "directory", "empty jsonl"])
def test_report_on_something_that_is_not_a_run(tmp_path, what):
    target = {"problem file": tmp_path / "model.py", "directory": tmp_path / "some_dir",
              "empty jsonl": tmp_path / "rows.jsonl"}[what]
    if what == "directory":
        target.mkdir()
    else:
        target.write_text(Path(EXAMPLE).read_text() if what == "problem file" else "")
    before = sorted(tmp_path.rglob("*"))
    one_line(ratchet("report", str(target)), EXIT_USAGE, f"ratchet report: {target}: ")
    assert sorted(tmp_path.rglob("*")) == before  # no report.html, nothing else


def test_report_to_an_unwritable_page(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    (run / "results.jsonl").write_text("")  # a run that has finished no problem yet: still a run
    page = tmp_path / "no_such_dir" / "report.html"
    one_line(ratchet("report", str(run), "--html", str(page)), EXIT_USAGE, f"ratchet report: cannot write {page}: ")


# --- --resume with nothing to resume --------------------------------------------------------------

def test_resume_with_nothing_to_resume_creates_no_workspace(tmp_path):
    root = tmp_path / "ws"
    one_line(ratchet("optimize", EXAMPLE, "--resume", "--workspace", str(root)), EXIT_USAGE,
             "nothing to resume for", "no run was started")
    assert not root.exists()
    root.mkdir()  # a workspace root holding nothing for this problem: still nothing made in it
    one_line(ratchet("optimize", EXAMPLE, "--resume", "--workspace", str(root)), EXIT_USAGE, "no run was started")
    assert list(root.iterdir()) == []


BAD_VALUES = [  # issue 37: accepted silently, or misfiled as another kind of failure after long work
    (["eval", EXAMPLE, CANDIDATE, "--timeout", "-5"], "--timeout -5"),
    (["eval", EXAMPLE, CANDIDATE, "--allow", "no-such-rule"], "--allow no-such-rule: no such guard rule"),
    (["optimize", EXAMPLE, "--patience", "-1"], "patience must be 0"),
    (["optimize", EXAMPLE, "--base-url", "notaurl"], "base_url 'notaurl' is not an http(s) URL"),
    (["suite", "check", str(ROOT / "tests" / "problems"), "--jobs", "0"], "--jobs 0: expected at least 1"),
]


@pytest.mark.parametrize("args, says", BAD_VALUES, ids=[" ".join(a[:1] + a[-2:]) for a, _ in BAD_VALUES])
def test_a_bad_value_is_one_line_before_any_work(tmp_path, args, says):
    proc = ratchet(*args, "--workspace", str(tmp_path / "ws")) if args[0] == "optimize" else ratchet(*args)
    one_line(proc, EXIT_USAGE, says)
    assert not (tmp_path / "ws").exists()  # nothing half-written


def test_a_misspelled_table_in_the_config_file_is_named(tmp_path):
    config = tmp_path / "ratchet.toml"
    config.write_text("[optimise]\nmax_attempts = 3\n")
    proc = ratchet("optimize", EXAMPLE, "--config", str(config), "--workspace", str(tmp_path / "ws"))
    one_line(proc, EXIT_USAGE, str(config), "unknown table [optimise]")


def test_suite_check_on_a_cpu_runs_the_suite_at_its_small_sizes(tmp_path):
    """Issue 37: `ratchet suite check suite/` on a 24 GB CPU machine was killed by the OOM killer
    after 148 s, silently (the suite's GPU sizes); `batch` already switched to SUITE_SCALE=small on
    a CPU. Two of the suite's problems, checked on the CPU: said in one line, and done."""
    for name in ("01_swish_scale.py", "05_row_sum_scale.py"):
        (tmp_path / name).write_text((ROOT / "suite" / name).read_text())
    proc = ratchet("suite", "check", str(tmp_path), "--device", "cpu")
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr.splitlines() == [next(l for l in proc.stderr.splitlines() if "SUITE_SCALE=small" in l)]
    assert "0 of 2 problem(s) flagged" in proc.stdout


def test_batch_refuses_a_device_it_would_have_ignored(tmp_path):
    """Issue 37: `RATCHET_DEVICE=tpu ratchet batch ...` ran, the device silently ignored (a batch's
    workers take their slots' devices)."""
    proc = ratchet("batch", str(ROOT / "suite"), "--filter", "^01_", "--out", str(tmp_path / "run"),
                   env={"RATCHET_DEVICE": "tpu"})
    one_line(proc, EXIT_USAGE, "RATCHET_DEVICE=tpu")
    assert not (tmp_path / "run").exists()


def test_batch_out_naming_a_file_is_one_line(tmp_path):
    """Issue 37: `batch --out FILE` ended in a traceback (NotADirectoryError) after the settings work."""
    afile = tmp_path / "afile"
    afile.write_text("x")
    proc = ratchet("batch", str(ROOT / "suite"), "--filter", "^01_", "--out", str(afile))
    one_line(proc, EXIT_USAGE, f"--out {afile}: not a directory")
    assert afile.read_text() == "x"


def test_eval_and_optimize_give_a_bad_problem_the_same_answer(tmp_path):
    """Issue 37: a problem whose get_inputs() returns a Tensor was "not a valid problem" (exit 3) to
    `eval` and "unrecognized" (exit 12) to `optimize` with the built-in policy."""
    problem = tmp_path / "tensor_inputs.py"
    problem.write_text("import torch\nimport torch.nn as nn\n\n\nclass Model(nn.Module):\n    def forward(self, x):\n"
                       "        return x * 2\n\n\ndef get_inputs():\n    return torch.randn(16)\n\n\n"
                       "def get_init_inputs():\n    return []\n")
    answers = [ratchet("eval", str(problem), CANDIDATE, "--device", "cpu"),
               ratchet("optimize", str(problem), "--device", "cpu", "--workspace", str(tmp_path / "ws"))]
    for proc in answers:
        assert proc.returncode == EXIT_BAD_PROBLEM, proc.stderr
        assert "get_inputs() returned Tensor, expected a list" in proc.stderr.splitlines()[-1]
        assert "Traceback" not in proc.stderr
    assert not (tmp_path / "ws").exists()


def test_a_second_optimize_run_does_not_claim_a_new_best(tmp_path):
    """Issue 37: run twice on the same workspace, the built-in policy's second run found the same
    kernel and printed "new best" and "best: attempt 2", while the best file and `ratchet log` said
    attempt 1. The workspace's best is named as it is."""
    ws = str(tmp_path / "ws")
    first = ratchet("optimize", EXAMPLE, "--device", "cpu", "--workspace", ws)
    second = ratchet("optimize", EXAMPLE, "--device", "cpu", "--workspace", ws)
    assert first.returncode == second.returncode == 0, second.stderr
    assert "new best" in first.stderr and "new best" not in second.stderr
    assert "best of this run: attempt 2" in second.stdout
    assert "the workspace's best, attempt 1, beats this run's" in second.stdout
